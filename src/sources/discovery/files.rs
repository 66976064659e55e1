//! What a run folder holds: progress logs, the server's log, output and input files.

use crate::parse::{ansi, Format, ServerLog};
use crate::sources::log::detect_now;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Output files by name, as pipelines name them (and the OpenAI Batch API's downloads, and
/// what vLLM's `run_batch -o` is usually given). Each is also the glob of its family, so a
/// partition folder that appears later is found by the same glob.
const OUTPUT_NAMES: [&str; 6] = [
    "raw_responses.jsonl",
    "responses*.jsonl",
    "output*.jsonl",
    "results*.jsonl",
    "generations*.jsonl",
    "batch_output*.jsonl",
];
const INPUT_NAMES: [&str; 5] = [
    "prompts*.jsonl",
    "input*.jsonl",
    "questions*.jsonl",
    "batch_input*.jsonl",
    "requests*.jsonl",
];
/// How deep under the run folder output files are looked for (`DIR/prepared/B1/x.jsonl` is
/// 3; distilabel's `distilabel_cache/P/S/executions/E/data/steps_outputs/STEP/N.parquet` is 9).
const MAX_DEPTH: usize = 9;
/// Entries looked at in all, so a run folder with millions of files costs a bounded scan.
const MAX_ENTRIES: usize = 100_000;

/// A log in the run folder and what its first lines say it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundLog {
    pub path: PathBuf,
    /// `Auto` while no line has decided; `Sglang` or `Vllm` for a server's log.
    pub format: Format,
}

/// `*.log`, `*.out` and `nohup.out` in `dir` and `dir/logs`, in name order.
pub fn logs(dir: &Path) -> Vec<FoundLog> {
    let mut paths: Vec<PathBuf> = [dir.to_owned(), dir.join("logs")]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "log" || e == "out")
                || p.file_name().is_some_and(|n| n == "nohup.out")
        })
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| FoundLog {
            format: classify(&path),
            path,
        })
        .collect()
}

/// A server's log when a line of it is an SGLang or vLLM report (a server's log also holds
/// tqdm bars while it loads weights, so this is asked first), else what `auto` finds.
pub fn classify(path: &Path) -> Format {
    use std::io::Read;
    let mut head = Vec::new();
    if std::fs::File::open(path)
        .and_then(|f| f.take(1024 * 1024).read_to_end(&mut head))
        .is_err()
    {
        return Format::Auto;
    }
    let mut server = ServerLog::new(Format::Auto);
    let mut stripped = Vec::new();
    crate::parse::envelope::texts(&head, &mut |text| {
        if server.format().is_none() {
            server.parse(ansi::strip(text, &mut stripped));
        }
    });
    if let Some(format) = server.format() {
        return format;
    }
    detect_now(path).map_or(Format::Auto, |(format, _)| format)
}

/// Shards: a partition's records split over numbered files (`part-00000.jsonl`,
/// `shard-00013.jsonl`, Hugging Face's `train-00003-of-00040.jsonl`, `data-7.jsonl`). A name
/// of one of these shapes is a shard even alone in its folder; any other numbered name
/// (`chunk_0007.jsonl`, `00013.jsonl`) is one when its folder holds another of its shape, or
/// when it is gzip or parquet, which only libraries write (datatrove's `00000.jsonl.gz`, one
/// per task; distilabel's `00001.parquet`, one per batch).
const SHARD_NAMES: [&str; 4] = ["part-*", "shard-*", "*-of-*", "data-*"];
/// Words that make a shard an input (`prompts-00003.jsonl` is also a named input family).
const INPUT_WORDS: [&str; 5] = ["prompt", "input", "question", "request", "query"];
/// A folder named with one of these holds outputs, one partition per file when the files are
/// neither a family nor shards: `outputs/B1.jsonl`, `outputs/B2.jsonl`, as `run_batch -o`
/// users write them.
const OUTPUT_FOLDERS: [&str; 5] = ["output", "result", "generation", "response", "completion"];
/// The record files followed, by how their names end: JSONL, gzipped JSONL, parquet.
const RECORD_SUFFIXES: [&str; 3] = [".jsonl.gz", ".jsonl", ".parquet"];
/// The partition setting that names each file's partition by the file's own name.
pub const BY_FILE: &str = crate::sources::files::PARTITION_BY_FILE;
/// JSONL files passed over that `discover` names one by one; the rest are counted.
const NAME_PASSED_OVER: usize = 10;

/// What the record files under a run folder were taken as.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Jsonl {
    /// Output and input globs, one per folder layout and name family (or shard shape).
    pub outputs: Vec<String>,
    pub inputs: Vec<String>,
    /// Output globs whose partitions are not their files' folders: `{file}` for a folder of
    /// one file per partition.
    pub partitions: BTreeMap<String, String>,
    /// Files each glob matched when found.
    pub counts: BTreeMap<String, usize>,
    /// Record files no glob takes, to say so: the first few by name, then how many more.
    pub passed_over: Vec<String>,
}

/// The output and input globs for the record files under `dir`: one per folder layout and
/// name family, the partition folder as `*`. Hugging Face `datasets` folders (`.arrow` beside
/// a `state.json`) are outputs only where nothing else is: the libraries that save one
/// (Curator, distilabel) wrote the same records into their own files first.
pub fn jsonl_globs(dir: &Path) -> Jsonl {
    let mut found = Jsonl::default();
    let mut records = Vec::new();
    let mut saved_datasets = Vec::new();
    let mut seen = 0;
    walk(dir, 0, &mut seen, &mut |file| {
        let name = name_of(file);
        if suffix_of(name).is_some() {
            records.push(file.to_owned());
        } else if name.ends_with(".arrow")
            && file
                .parent()
                .is_some_and(|f| f.join("state.json").is_file())
        {
            saved_datasets.push(file.to_owned());
        }
    });
    // Numbered names by folder and shape, to tell a shard from a lone numbered file.
    let mut shapes: BTreeMap<(PathBuf, String), usize> = BTreeMap::new();
    for file in &records {
        if let (Some(folder), Some(shape)) = (file.parent(), shard_shape(name_of(file))) {
            *shapes.entry((folder.to_owned(), shape)).or_default() += 1;
        }
    }
    let mut passed_over = Vec::new();
    for file in &records {
        let name = name_of(file);
        let suffix = suffix_of(name).unwrap_or(".jsonl");
        let folder = file.parent().unwrap_or(dir);
        let named = [(&OUTPUT_NAMES[..], false), (&INPUT_NAMES[..], true)]
            .into_iter()
            .find_map(|(families, input)| {
                families.iter().find_map(|f| {
                    let family = f.replace(".jsonl", suffix);
                    glob::Pattern::new(&family)
                        .is_ok_and(|p| p.matches(name))
                        .then_some((family, input))
                })
            });
        let output_folder = {
            let folder_name = name_of(folder).to_ascii_lowercase();
            OUTPUT_FOLDERS.iter().any(|w| folder_name.starts_with(w))
        };
        let shard = || {
            let shape = shard_shape(name)?;
            let many = shapes.get(&(folder.to_owned(), shape.clone())) > Some(&1);
            let known = SHARD_NAMES
                .iter()
                .any(|s| glob::Pattern::new(s).is_ok_and(|p| p.matches(name)));
            let library = suffix != ".jsonl";
            // In an outputs folder `B1.jsonl` and `B2.jsonl` are partitions, not shards.
            let many = many && (!output_folder || padded_number(name));
            let lower = name.to_ascii_lowercase();
            (many || known || library)
                .then(|| (shape, INPUT_WORDS.iter().any(|w| lower.contains(w))))
        };
        let per_file = || output_folder.then(|| (format!("*{suffix}"), false));
        let by_file = named.is_none() && shard().is_none() && output_folder;
        let Some((family, input)) = named.or_else(shard).or_else(per_file) else {
            passed_over.push(file.clone());
            continue;
        };
        let glob = if folder == dir || by_file {
            folder.join(&family)
        } else {
            folder.parent().unwrap_or(dir).join("*").join(&family)
        };
        let glob = glob.display().to_string();
        if by_file {
            found.partitions.insert(glob.clone(), BY_FILE.to_owned());
        }
        add(&mut found, glob, input);
    }
    if found.outputs.is_empty() {
        for file in &saved_datasets {
            let folder = file.parent().unwrap_or(dir);
            let glob = folder.parent().unwrap_or(dir).join("*").join("*.arrow");
            add(&mut found, glob.display().to_string(), false);
        }
    }
    found.outputs.sort();
    found.inputs.sort();
    let more = passed_over.len().saturating_sub(NAME_PASSED_OVER);
    found.passed_over = passed_over
        .iter()
        .take(NAME_PASSED_OVER)
        .map(|p| p.display().to_string())
        .collect();
    if more > 0 {
        found.passed_over.push(format!("and {more} more"));
    }
    found
}

fn add(found: &mut Jsonl, glob: String, input: bool) {
    *found.counts.entry(glob.clone()).or_default() += 1;
    let globs = if input {
        &mut found.inputs
    } else {
        &mut found.outputs
    };
    if !globs.contains(&glob) {
        globs.push(glob);
    }
}

fn name_of(file: &Path) -> &str {
    file.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// A number as shards are numbered: zero-padded (`0007`) or long (`1234`), or the whole name.
fn padded_number(name: &str) -> bool {
    let stem = suffix_of(name)
        .and_then(|s| name.strip_suffix(s))
        .unwrap_or(name);
    stem.bytes().all(|b| b.is_ascii_digit())
        || stem
            .split(|c: char| !c.is_ascii_digit())
            .any(|n| n.len() >= 4 || (n.len() >= 2 && n.starts_with('0')))
}

fn suffix_of(name: &str) -> Option<&'static str> {
    RECORD_SUFFIXES.into_iter().find(|s| name.ends_with(s))
}

/// A numbered record file's shape, its numbers as `*` (`train-00003-of-00040.jsonl` is
/// `train-*-of-*.jsonl`; `00013.jsonl` is `[0-9]*.jsonl`, so that it takes no unnumbered
/// name beside it); `None` for a name without a number.
fn shard_shape(name: &str) -> Option<String> {
    let suffix = suffix_of(name)?;
    let stem = name.strip_suffix(suffix)?;
    if !stem.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut shape = String::new();
    let mut in_number = false;
    for c in stem.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                shape.push_str(if shape.is_empty() { "[0-9]*" } else { "*" });
            }
            in_number = true;
        } else {
            // Pattern characters in a name are taken literally.
            if matches!(c, '*' | '?' | '[' | ']') {
                shape.push('[');
                shape.push(c);
                shape.push(']');
            } else {
                shape.push(c);
            }
            in_number = false;
        }
    }
    shape.push_str(suffix);
    Some(shape)
}

fn walk(dir: &Path, depth: usize, seen: &mut usize, found: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        *seen += 1;
        if *seen > MAX_ENTRIES {
            return;
        }
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        match entry.file_type() {
            Ok(t) if t.is_dir() && !hidden && depth < MAX_DEPTH => {
                walk(&path, depth + 1, seen, found)
            }
            Ok(t) if t.is_file() => found(&path),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_name_the_layout_with_the_partition_as_a_star() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for (folder, name) in [
            ("prepared/B1", "raw_responses.jsonl"),
            ("prepared/B1", "prompts.jsonl"),
            ("prepared/B2", "raw_responses.jsonl"),
            ("eval", "results_0.jsonl"),
            ("eval", "questions.jsonl"),
            ("prepared/B1", "notes.jsonl"),
            (".cache/x", "responses.jsonl"),
            ("batches/b7", "batch_output.jsonl"),
            ("batches/b7", "batch_input.jsonl"),
        ] {
            std::fs::create_dir_all(d.join(folder)).unwrap();
            std::fs::write(d.join(folder).join(name), "{}\n").unwrap();
        }
        std::fs::write(d.join("outputs.jsonl"), "{}\n").unwrap();
        let Jsonl {
            outputs,
            inputs,
            passed_over,
            ..
        } = jsonl_globs(d);
        assert_eq!(
            passed_over,
            [d.join("prepared/B1/notes.jsonl").display().to_string()]
        );
        let at = |s: &str| d.join(s).display().to_string();
        assert_eq!(
            outputs,
            vec![
                at("*/results*.jsonl"),
                at("batches/*/batch_output*.jsonl"),
                at("output*.jsonl"),
                at("prepared/*/raw_responses.jsonl"),
            ]
        );
        assert_eq!(
            inputs,
            vec![
                at("*/questions*.jsonl"),
                at("batches/*/batch_input*.jsonl"),
                at("prepared/*/prompts*.jsonl")
            ]
        );
    }

    /// Makes the files a library run left (`tests/testdata/libraries/LIB/tree.txt`, sizes
    /// and paths as the real run wrote them), empty, under a new folder.
    fn library_tree(library: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let tree = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/testdata/libraries")
            .join(library)
            .join("tree.txt");
        for line in std::fs::read_to_string(tree).unwrap().lines() {
            let Some((_, path)) = line.split_once(' ').filter(|_| !line.starts_with('#')) else {
                continue;
            };
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        dir
    }

    fn relative(dir: &Path, globs: &[String]) -> Vec<String> {
        let root = format!("{}/", dir.display());
        globs.iter().map(|g| g.replace(&root, "")).collect()
    }

    #[test]
    fn library_layouts_are_found_with_their_partitions_and_no_record_twice() {
        let datatrove = library_tree("datatrove");
        let found = jsonl_globs(datatrove.path());
        assert_eq!(
            relative(datatrove.path(), &found.outputs),
            ["output/*/[0-9]*.jsonl.gz"]
        );
        assert_eq!(
            relative(datatrove.path(), &found.inputs),
            ["input/*/prompts*.jsonl"]
        );

        // Curator's Arrow files (its cache and the user's save_to_disk) hold the responses again.
        let curator = library_tree("curator");
        let found = jsonl_globs(curator.path());
        assert_eq!(
            relative(curator.path(), &found.outputs),
            ["curator_cache/*/responses*.jsonl"]
        );
        assert_eq!(
            relative(curator.path(), &found.inputs),
            ["curator_cache/*/requests*.jsonl"]
        );

        // distilabel's leaf steps' batches, nine folders down; its distiset is the same rows.
        let distilabel = library_tree("distilabel");
        let found = jsonl_globs(distilabel.path());
        let outputs = relative(distilabel.path(), &found.outputs);
        assert_eq!(outputs.len(), 1, "{outputs:?}");
        assert!(
            outputs[0].starts_with("distilabel_cache/pulse-distilabel/")
                && outputs[0].ends_with("/data/steps_outputs/*/[0-9]*.parquet"),
            "{outputs:?}"
        );
        assert!(found.partitions.is_empty());
    }

    #[test]
    fn a_saved_dataset_is_the_output_only_where_nothing_else_is() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for split in ["alpha", "beta"] {
            std::fs::create_dir_all(d.join("datasets").join(split)).unwrap();
            std::fs::write(d.join("datasets").join(split).join("state.json"), "{}").unwrap();
            let arrow = d
                .join("datasets")
                .join(split)
                .join("data-00000-of-00001.arrow");
            std::fs::write(arrow, "").unwrap();
        }
        std::fs::write(d.join("cache-1234.arrow"), "").unwrap();
        assert_eq!(relative(d, &jsonl_globs(d).outputs), ["datasets/*/*.arrow"]);
        std::fs::write(d.join("results.jsonl"), "").unwrap();
        assert_eq!(relative(d, &jsonl_globs(d).outputs), ["results*.jsonl"]);
    }

    #[test]
    fn a_folder_of_outputs_holds_one_partition_per_file_and_shards_stay_one() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for path in [
            "outputs/B1.jsonl",
            "outputs/B2.jsonl",
            "results/math/chunk_0001.jsonl",
            "results/math/chunk_0002.jsonl",
            "gen/code/00000.jsonl.gz",
            "gen/code/00001.jsonl.gz",
        ] {
            std::fs::create_dir_all(d.join(path).parent().unwrap()).unwrap();
            std::fs::write(d.join(path), "").unwrap();
        }
        let found = jsonl_globs(d);
        assert_eq!(
            relative(d, &found.outputs),
            [
                "gen/*/[0-9]*.jsonl.gz",
                "outputs/*.jsonl",
                "results/*/chunk_*.jsonl"
            ]
        );
        let by_file: Vec<_> = found
            .partitions
            .iter()
            .map(|(g, p)| (relative(d, std::slice::from_ref(g)), p.as_str()))
            .collect();
        assert_eq!(by_file, [(vec!["outputs/*.jsonl".to_owned()], BY_FILE)]);
    }

    #[test]
    fn a_server_log_is_told_from_a_progress_log() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("logs")).unwrap();
        std::fs::write(
            d.join("logs/server.log"),
            "Loading safetensors checkpoint shards: 100% Completed | 8/8 [00:10<00:00]\n\
             [2026-08-28 22:30:08 TP0] Decode batch, #running-req: 233, #token: 370959, token usage: 0.82, cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317, \n",
        )
        .unwrap();
        std::fs::write(d.join("run.log"), "Processing: B1_glaive (SHORT)\n").unwrap();
        std::fs::write(d.join("nohup.out"), "").unwrap();
        std::fs::write(d.join("notes.txt"), "").unwrap();
        let found = logs(d);
        let got: Vec<(String, Format)> = found
            .iter()
            .map(|l| {
                (
                    l.path.strip_prefix(d).unwrap().display().to_string(),
                    l.format,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("logs/server.log".to_owned(), Format::Sglang),
                ("nohup.out".to_owned(), Format::Auto),
                ("run.log".to_owned(), Format::RunInference),
            ]
        );
    }
}
