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
/// How deep under the run folder output files are looked for (`DIR/prepared/B1/x.jsonl` is 3).
const MAX_DEPTH: usize = 4;
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
/// (`chunk_0007.jsonl`, `00013.jsonl`) is one when its folder holds another of its shape.
const SHARD_NAMES: [&str; 4] = ["part-*", "shard-*", "*-of-*", "data-*"];
/// Words that make a shard an input (`prompts-00003.jsonl` is also a named input family).
const INPUT_WORDS: [&str; 5] = ["prompt", "input", "question", "request", "query"];
/// JSONL files passed over that `discover` names one by one; the rest are counted.
const NAME_PASSED_OVER: usize = 10;

/// What the JSONL files under a run folder were taken as.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Jsonl {
    /// Output and input globs, one per folder layout and name family (or shard shape).
    pub outputs: Vec<String>,
    pub inputs: Vec<String>,
    /// Files each glob matched when found.
    pub counts: BTreeMap<String, usize>,
    /// JSONL files no glob takes, to say so: the first few by name, then how many more.
    pub passed_over: Vec<String>,
}

/// The output and input globs for the JSONL files under `dir`: one per folder layout and name
/// family, the partition folder as `*`.
pub fn jsonl_globs(dir: &Path) -> Jsonl {
    let mut found = Jsonl::default();
    let mut jsonl = Vec::new();
    let mut seen = 0;
    walk(dir, 0, &mut seen, &mut |file| {
        if file.extension().is_some_and(|e| e == "jsonl") {
            jsonl.push(file.to_owned());
        }
    });
    // Numbered names by folder and shape, to tell a shard from a lone numbered file.
    let mut shapes: BTreeMap<(PathBuf, String), usize> = BTreeMap::new();
    for file in &jsonl {
        if let (Some(folder), Some(shape)) = (file.parent(), shard_shape(name_of(file))) {
            *shapes.entry((folder.to_owned(), shape)).or_default() += 1;
        }
    }
    let mut passed_over = Vec::new();
    for file in &jsonl {
        let name = name_of(file);
        let folder = file.parent().unwrap_or(dir);
        let named = [(&OUTPUT_NAMES[..], false), (&INPUT_NAMES[..], true)]
            .into_iter()
            .find_map(|(families, input)| {
                families
                    .iter()
                    .find(|f| glob::Pattern::new(f).is_ok_and(|p| p.matches(name)))
                    .map(|f| ((*f).to_owned(), input))
            });
        let shard = || {
            let shape = shard_shape(name)?;
            let many = shapes.get(&(folder.to_owned(), shape.clone())) > Some(&1);
            let known = SHARD_NAMES
                .iter()
                .any(|s| glob::Pattern::new(s).is_ok_and(|p| p.matches(name)));
            let lower = name.to_ascii_lowercase();
            (many || known).then(|| (shape, INPUT_WORDS.iter().any(|w| lower.contains(w))))
        };
        let Some((family, input)) = named.or_else(shard) else {
            passed_over.push(file.clone());
            continue;
        };
        let glob = if folder == dir {
            dir.join(&family)
        } else {
            folder.parent().unwrap_or(dir).join("*").join(&family)
        };
        let glob = glob.display().to_string();
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

fn name_of(file: &Path) -> &str {
    file.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// A numbered JSONL name's shape, its numbers as `*` (`train-00003-of-00040.jsonl` is
/// `train-*-of-*.jsonl`; `00013.jsonl` is `[0-9]*.jsonl`, so that it takes no unnumbered
/// name beside it); `None` for a name without a number.
fn shard_shape(name: &str) -> Option<String> {
    let stem = name.strip_suffix(".jsonl")?;
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
    shape.push_str(".jsonl");
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
