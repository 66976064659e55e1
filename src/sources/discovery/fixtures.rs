//! Discovery and the process probe on fixture trees laid out like `/proc`
//! (`tests/testdata/proc/CASE/`): a driver, SGLang and vLLM with their workers, a supervisor's
//! shell, a container's pids. Each case's findings are its golden file
//! (`tests/testdata/proc/CASE.golden`; `UPDATE_GOLDEN=1` rewrites them). The trees name the
//! run folder `/RUN`: a case is copied with that name made a scratch folder's, where the files
//! its processes hold are made, and the findings say `/RUN` again.

use super::procs::Table;
use super::scan;
use crate::procfs::Procfs;
use crate::sources::probe::process::{find, ProcessTarget};
use std::path::{Path, PathBuf};

const CASES: [&str; 5] = ["driver", "sglang", "vllm", "supervisor", "container"];

/// What a tree's links and files say in place of the run folder.
const RUN: &str = "/RUN";

/// A progress log's line, for the files the fixtures' drivers write.
const PROGRESS: &str = "Processed prompts:  10%|#         | 10/100 [00:01<00:09, 10.00it/s]\n";

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testdata/proc")
        .join(case)
}

/// Copies the tree at `from` to `to`, `/RUN` made `run` in its links and files; each file a
/// link names under `/RUN` is made in `run`.
fn copy_moved(from: &Path, to: &Path, run: &Path) {
    let moved = |text: &str| text.replacen(RUN, &run.to_string_lossy(), 1);
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let (path, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            let link = std::fs::read_link(&path).unwrap();
            let link = link.to_string_lossy();
            if let Some(file) = link.strip_prefix(RUN).filter(|_| link.starts_with("/RUN/")) {
                let file = run.join(file.trim_start_matches('/'));
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                if !file.exists() {
                    let text = if file.ends_with("progress.log") {
                        PROGRESS
                    } else {
                        ""
                    };
                    std::fs::write(&file, text).unwrap();
                }
            }
            std::os::unix::fs::symlink(moved(&link), &target).unwrap();
        } else if kind.is_dir() {
            copy_moved(&path, &target, run);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            let text = String::from_utf8_lossy(&bytes).replace(RUN, &run.to_string_lossy());
            std::fs::write(&target, text).unwrap();
        }
    }
}

/// A case's findings: what a scan of its tree finds, and which process the probe finds for
/// each kind of target.
fn findings(case: &str) -> String {
    let scratch = tempfile::tempdir().unwrap();
    let scratch = std::fs::canonicalize(scratch.path()).unwrap();
    let run = scratch.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let root = scratch.join("proc");
    copy_moved(&fixture(case), &root, &run);
    let procfs = Procfs::at(&root);
    let mut table = Table::at(procfs.clone());
    let found = scan(&run, &mut table, &[]);
    let mut out = String::from("# discovery\n");
    out += &serde_json::to_string_pretty(&found).unwrap();
    out += "\n# the driver still runs\n";
    out += &format!("{:?}\n", found.driver.as_ref().map(|d| table.lives(d)));
    out += "# the probe\n";
    for target in [
        ProcessTarget::Match("run_inference.py".into()),
        ProcessTarget::Match("sglang.launch_server".into()),
        ProcessTarget::Match("vllm serve".into()),
        ProcessTarget::MatchIn("python".into(), run.clone()),
    ] {
        out += &format!("{target:?}: {:?}\n", find(&procfs, &target, None));
    }
    out.replace(&*run.to_string_lossy(), RUN)
}

#[test]
fn each_fixture_tree_is_found_as_its_golden_says() {
    for case in CASES {
        crate::testing::golden(
            &format!("tests/testdata/proc/{case}.golden"),
            &findings(case),
        );
    }
}

/// The probe keeps the process it knew while it still matches, on a tree as on the system.
#[test]
fn a_known_process_is_kept_on_a_fixture_tree() {
    let procfs = Procfs::at(fixture("supervisor"));
    let target = ProcessTarget::Match("run_inference.py".into());
    assert_eq!(find(&procfs, &target, None), Some(510), "the lowest pid");
    assert_eq!(
        find(&procfs, &target, Some(511)),
        Some(511),
        "the known one"
    );
}
