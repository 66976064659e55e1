//! Columnar output files, counted by the rows their own metadata gives: parquet (distilabel
//! writes each step's batches as `NNNNN.parquet`) and Arrow IPC (Hugging Face `datasets`
//! saves and caches its tables as `.arrow`, in the streaming format). No column is decoded.
//!
//! Such a file is written whole and then left alone, so it is read again from its metadata
//! whenever its size or modification time changes. A file whose metadata cannot be read yet
//! (a parquet footer not written, an Arrow batch cut short) counts only what is complete in
//! it, which for parquet is nothing: a row is counted once it can be read, never before.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// A flatbuffer message header larger than this is taken for damage, not read into memory.
const MAX_ARROW_METADATA: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TableFormat {
    Parquet,
    Arrow,
}

impl TableFormat {
    /// The format a file's name says it holds; `None` for line-based files.
    pub(super) fn of(path: &Path) -> Option<TableFormat> {
        match path.extension()?.to_str()? {
            "parquet" => Some(TableFormat::Parquet),
            "arrow" => Some(TableFormat::Arrow),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            TableFormat::Parquet => "parquet",
            TableFormat::Arrow => "Arrow IPC",
        }
    }
}

/// Rows that can be read in `file`, and whether the file is whole (a parquet footer read, an
/// Arrow stream's end marker); an error says what cannot be read.
pub(super) fn rows(file: &File, format: TableFormat) -> Result<(u64, bool), String> {
    let counted = match format {
        TableFormat::Parquet => parquet_rows(file),
        TableFormat::Arrow => arrow_rows(file),
    };
    counted.map_err(|e| format!("cannot read its {} metadata: {e}", format.name()))
}

fn parquet_rows(file: &File) -> Result<(u64, bool), String> {
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    // pyarrow writes the footer last: a file without its closing magic is still being written.
    if len < 12 || !ends_with_magic(file, len, b"PAR1")? {
        return Ok((0, false));
    }
    let metadata = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(file)
        .map_err(|e| e.to_string())?;
    let rows = metadata.file_metadata().num_rows();
    u64::try_from(rows)
        .map(|rows| (rows, true))
        .map_err(|_| format!("its footer gives {rows} rows"))
}

fn ends_with_magic(file: &File, len: u64, magic: &[u8]) -> Result<bool, String> {
    use std::os::unix::fs::FileExt;
    let mut tail = vec![0; magic.len()];
    file.read_exact_at(&mut tail, len - magic.len() as u64)
        .map_err(|e| e.to_string())?;
    Ok(tail == magic)
}

/// Walks the messages of an Arrow IPC stream (or of the stream inside an IPC file, after its
/// `ARROW1` magic), adding up the rows of each record batch whose body is all there and
/// skipping the bodies unread.
fn arrow_rows(file: &File) -> Result<(u64, bool), String> {
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut reader = io::BufReader::new(file);
    let mut at = 0u64;
    let mut magic = [0u8; 8];
    if read_full(&mut reader, &mut magic).map_err(|e| e.to_string())? == 8
        && magic.starts_with(b"ARROW1")
    {
        at = 8;
    }
    reader
        .seek(SeekFrom::Start(at))
        .map_err(|e| e.to_string())?;
    let mut rows = 0u64;
    let mut metadata = Vec::new();
    loop {
        let mut word = [0u8; 4];
        if read_full(&mut reader, &mut word).map_err(|e| e.to_string())? < 4 {
            return Ok((rows, false));
        }
        let mut size = u32::from_le_bytes(word);
        let mut prefix = 4u64;
        if size == u32::MAX {
            // The continuation marker, then the metadata's size (Arrow 0.15 and later).
            if read_full(&mut reader, &mut word).map_err(|e| e.to_string())? < 4 {
                return Ok((rows, false));
            }
            size = u32::from_le_bytes(word);
            prefix = 8;
        }
        if size == 0 {
            return Ok((rows, true));
        }
        let size = size as usize;
        if size > MAX_ARROW_METADATA {
            return Err(format!("a message header of {size} bytes at byte {at}"));
        }
        metadata.resize(size, 0);
        if read_full(&mut reader, &mut metadata).map_err(|e| e.to_string())? < size {
            return Ok((rows, false));
        }
        let message = arrow_ipc::root_as_message(&metadata)
            .map_err(|e| format!("the message at byte {at}: {e}"))?;
        let body = u64::try_from(message.bodyLength())
            .map_err(|_| format!("the message at byte {at} has a negative body length"))?;
        let end = at + prefix + size as u64 + body;
        if end > len {
            return Ok((rows, false));
        }
        if let Some(batch) = message.header_as_record_batch() {
            let length = u64::try_from(batch.length())
                .map_err(|_| format!("the record batch at byte {at} has a negative length"))?;
            rows += length;
        }
        reader
            .seek(SeekFrom::Start(end))
            .map_err(|e| e.to_string())?;
        at = end;
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn testdata(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/testdata/outputs")
            .join(name)
    }

    fn count(name: &str) -> Result<(u64, bool), String> {
        let path = testdata(name);
        let format = TableFormat::of(&path).unwrap();
        rows(&File::open(&path).unwrap(), format)
    }

    /// Cuts a copy of a sample at `keep` bytes, as a reader finds a file being written.
    fn cut(name: &str, keep: impl Fn(usize) -> usize) -> Result<(u64, bool), String> {
        let bytes = std::fs::read(testdata(name)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes[..keep(bytes.len())]).unwrap();
        rows(&File::open(&path).unwrap(), TableFormat::of(&path).unwrap())
    }

    #[test]
    fn parquet_rows_come_from_its_footer_and_a_file_without_one_counts_nothing() {
        assert_eq!(count("pyarrow-50-rows.parquet"), Ok((50, true)));
        assert_eq!(cut("pyarrow-50-rows.parquet", |n| n - 9), Ok((0, false)));
        assert_eq!(cut("pyarrow-50-rows.parquet", |_| 3), Ok((0, false)));
    }

    #[test]
    fn a_damaged_parquet_footer_is_an_error() {
        let mut bytes = std::fs::read(testdata("pyarrow-50-rows.parquet")).unwrap();
        let n = bytes.len();
        // The footer's length, just before the closing magic, made to point past the start.
        bytes[n - 8..n - 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.parquet");
        std::fs::write(&path, bytes).unwrap();
        let err = rows(&File::open(&path).unwrap(), TableFormat::Parquet).unwrap_err();
        assert!(err.contains("parquet metadata"), "{err}");
    }

    #[test]
    fn arrow_streams_and_files_count_their_whole_batches() {
        // `datasets` writes the stream format: three batches of 4, 4 and 2 rows.
        assert_eq!(count("datasets-10-rows.arrow"), Ok((10, true)));
        assert_eq!(count("pyarrow-file-10-rows.arrow"), Ok((10, true)));
        // The end marker and the last batch's body cut off: the first two batches remain.
        let without_last = cut("datasets-10-rows.arrow", |n| n - 20);
        assert_eq!(without_last, Ok((8, false)));
        assert_eq!(cut("datasets-10-rows.arrow", |_| 6), Ok((0, false)));
    }

    #[test]
    fn bytes_that_are_not_arrow_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.arrow");
        std::fs::write(&path, b"\xff\xff\xff\xff\x10\x00\x00\x00not a flatbuffer").unwrap();
        let err = rows(&File::open(&path).unwrap(), TableFormat::Arrow).unwrap_err();
        assert!(err.contains("Arrow IPC metadata"), "{err}");
    }
}
