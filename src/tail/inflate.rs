//! A gzip stream read as it grows: what a writer has flushed is inflated and handed on, and
//! the rest waits for its bytes.
//!
//! datatrove's `JsonlWriter` (and anything else that writes through Python's `gzip` module)
//! appends compressed bursts to a `.jsonl.gz` for hours before its trailer comes. flate2's
//! `GzDecoder` takes the end of the bytes for the end of the stream and fails on the missing
//! trailer, so it cannot follow such a file; the header is read here by RFC 1952's layout and
//! the body inflated with flate2's raw `Decompress`, which keeps its state between reads.
//! Members follow each other (`cat a.gz b.gz`, a writer reopened in append mode). The CRC is
//! not checked: inflating a damaged stream fails on its own in nearly every case, and a line
//! is handed on only once its newline was inflated, so a record is whole or not counted.

use flate2::{Decompress, FlushDecompress, Status};

/// A header longer than this (a huge `FEXTRA` or name) is taken for something else.
const MAX_HEADER: usize = 64 * 1024;
const OUT_CHUNK: usize = 64 * 1024;

#[derive(Debug)]
pub(super) struct Inflate {
    state: State,
    out: Vec<u8>,
}

#[derive(Debug)]
enum State {
    /// The bytes of a member's header read so far; empty between members.
    Header(Vec<u8>),
    Body(Box<Decompress>),
    /// Bytes of the 8-byte trailer (CRC32, size) still to pass over.
    Trailer(usize),
    /// What is wrong with the stream; nothing more is read from it.
    Failed(String),
}

impl Inflate {
    pub(super) fn new() -> Inflate {
        Inflate {
            state: State::Header(Vec::new()),
            out: Vec::new(),
        }
    }

    /// Between members: the bytes read so far inflate to exactly what was handed on, so a
    /// new reader started at this offset continues the stream.
    pub(super) fn at_member_boundary(&self) -> bool {
        matches!(&self.state, State::Header(seen) if seen.is_empty())
    }

    /// Inflates `input`, the file's next bytes, handing each inflated piece to `emit`.
    pub(super) fn feed(
        &mut self,
        mut input: &[u8],
        emit: &mut dyn FnMut(&[u8]),
    ) -> Result<(), String> {
        if self.out.len() < OUT_CHUNK {
            self.out.resize(OUT_CHUNK, 0);
        }
        while !input.is_empty() {
            match &mut self.state {
                State::Failed(why) => return Err(why.clone()),
                State::Header(seen) => {
                    let had = seen.len();
                    seen.extend_from_slice(input);
                    match header_len(seen) {
                        Ok(Some(len)) => {
                            input = &input[len - had..];
                            self.state = State::Body(Box::new(Decompress::new(false)));
                        }
                        Ok(None) if seen.len() > MAX_HEADER => {
                            return self.fail("a gzip header longer than 64 KiB".into())
                        }
                        Ok(None) => return Ok(()),
                        Err(why) => return self.fail(why),
                    }
                }
                State::Body(inflater) => {
                    let (before_in, before_out) = (inflater.total_in(), inflater.total_out());
                    let status =
                        match inflater.decompress(input, &mut self.out, FlushDecompress::None) {
                            Ok(status) => status,
                            Err(e) => {
                                return self.fail(format!("its deflate data is corrupt ({e})"))
                            }
                        };
                    let used = (inflater.total_in() - before_in) as usize;
                    let made = (inflater.total_out() - before_out) as usize;
                    input = &input[used..];
                    if made > 0 {
                        emit(&self.out[..made]);
                    }
                    if status == Status::StreamEnd {
                        self.state = State::Trailer(8);
                    } else if used == 0 && made == 0 {
                        // Everything given is inside a block whose end has not come yet.
                        return Ok(());
                    }
                }
                State::Trailer(left) => {
                    let take = (*left).min(input.len());
                    input = &input[take..];
                    *left -= take;
                    if *left == 0 {
                        self.state = State::Header(Vec::new());
                    }
                }
            }
        }
        Ok(())
    }

    fn fail(&mut self, why: String) -> Result<(), String> {
        self.state = State::Failed(why.clone());
        Err(why)
    }
}

/// The length of the gzip header at the start of `b` (RFC 1952, 2.3), `None` while it is not
/// all there.
fn header_len(b: &[u8]) -> Result<Option<usize>, String> {
    const FHCRC: u8 = 2;
    const FEXTRA: u8 = 4;
    const FNAME: u8 = 8;
    const FCOMMENT: u8 = 16;
    let magic = [0x1f, 0x8b, 8];
    let n = b.len().min(3);
    if b[..n] != magic[..n] {
        return Err("it is not gzip (its first bytes are not a gzip header)".into());
    }
    if b.len() < 10 {
        return Ok(None);
    }
    let flags = b[3];
    if flags & 0xe0 != 0 {
        return Err("its gzip header has reserved flags set".into());
    }
    let mut at = 10;
    if flags & FEXTRA != 0 {
        let Some(len) = b.get(at..at + 2) else {
            return Ok(None);
        };
        at += 2 + usize::from(u16::from_le_bytes([len[0], len[1]]));
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            match b.get(at..).and_then(|rest| memchr::memchr(0, rest)) {
                Some(end) => at += end + 1,
                None => return Ok(None),
            }
        }
    }
    if flags & FHCRC != 0 {
        at += 2;
    }
    Ok((b.len() >= at).then_some(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    fn inflate_in_pieces(bytes: &[u8], piece: usize) -> (Vec<u8>, Result<(), String>) {
        let mut inflate = Inflate::new();
        let mut out = Vec::new();
        for chunk in bytes.chunks(piece.max(1)) {
            if let Err(e) = inflate.feed(chunk, &mut |b| out.extend_from_slice(b)) {
                return (out, Err(e));
            }
        }
        (out, Ok(()))
    }

    fn lines(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| format!("{{\"id\": {i}, \"text\": \"record {i}\"}}\n").into_bytes())
            .collect()
    }

    #[test]
    fn any_split_of_the_bytes_inflates_to_the_same_text() {
        let text = lines(2000);
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&text).unwrap();
        let gz = gz.finish().unwrap();
        for piece in [1, 7, 4096, gz.len()] {
            let (out, result) = inflate_in_pieces(&gz, piece);
            assert_eq!(result, Ok(()));
            assert_eq!(out, text, "in pieces of {piece}");
        }
    }

    #[test]
    fn a_stream_still_being_written_hands_on_what_was_flushed() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&lines(100)).unwrap();
        gz.flush().unwrap();
        let flushed = gz.get_ref().len();
        let (out, result) = inflate_in_pieces(&gz.get_ref()[..flushed], 512);
        assert_eq!(result, Ok(()));
        assert_eq!(out, lines(100));
    }

    #[test]
    fn members_follow_each_other_and_their_boundary_is_known() {
        let member = |text: &[u8]| {
            let mut gz = flate2::GzBuilder::new()
                .filename("part.jsonl")
                .comment("from a test")
                .write(Vec::new(), Compression::fast());
            gz.write_all(text).unwrap();
            gz.finish().unwrap()
        };
        let (a, b) = (member(b"{\"a\": 1}\n"), member(b"{\"b\": 2}\n"));
        let mut inflate = Inflate::new();
        let mut out = Vec::new();
        inflate.feed(&a, &mut |x| out.extend_from_slice(x)).unwrap();
        assert!(inflate.at_member_boundary());
        inflate
            .feed(&b[..5], &mut |x| out.extend_from_slice(x))
            .unwrap();
        assert!(!inflate.at_member_boundary());
        inflate
            .feed(&b[5..], &mut |x| out.extend_from_slice(x))
            .unwrap();
        assert_eq!(out, b"{\"a\": 1}\n{\"b\": 2}\n");
    }

    #[test]
    fn text_that_is_not_gzip_is_said_and_stays_refused() {
        let mut inflate = Inflate::new();
        let err = inflate.feed(b"{\"id\": 1}\n", &mut |_| {}).unwrap_err();
        assert!(err.contains("not gzip"), "{err}");
        assert_eq!(inflate.feed(b"\x1f\x8b", &mut |_| {}), Err(err));
    }

    #[test]
    fn corrupt_deflate_data_is_an_error_not_text() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&lines(50)).unwrap();
        let mut bytes = gz.finish().unwrap();
        // A stored-block header with a length and its complement that disagree.
        bytes.truncate(10);
        bytes.extend_from_slice(&[0x00, 0x05, 0x00, 0x05, 0x00]);
        bytes.extend_from_slice(b"hello");
        let (out, result) = inflate_in_pieces(&bytes, 3);
        assert!(out.is_empty());
        assert!(result.unwrap_err().contains("corrupt"));
    }
}
