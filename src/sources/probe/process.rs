//! Finding the pipeline's driver process: by a piece of its command line, or by a pid file.

use crate::procfs::Procfs;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessTarget {
    /// A substring of `/proc/PID/cmdline` (arguments joined with spaces).
    Match(String),
    /// A substring of the command line, of a process tied to the folder: working in it,
    /// naming it in its arguments, or holding a file in it open. Discovery knows a driver by
    /// its program and its run folder, so the same driver restarted with other arguments is
    /// still the driver, and another run's copy of the program is not.
    MatchIn(String, PathBuf),
    /// A file holding the pid.
    PidFile(PathBuf),
}

/// The pid of the running target in `procfs`, if any. Zombies are not running; the sidecar
/// itself, whose own command line holds the match text, is never the target. `known`, the pid
/// found last time, is kept while it still matches: a second matching process started later
/// does not take its place, even when pids have wrapped around and the newcomer's is lower.
pub fn find(procfs: &Procfs, target: &ProcessTarget, known: Option<u32>) -> Option<u32> {
    match target {
        ProcessTarget::PidFile(path) => {
            let pid = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
            procfs.alive(pid).then_some(pid)
        }
        ProcessTarget::Match(needle) | ProcessTarget::MatchIn(needle, _) => {
            let dir = match target {
                ProcessTarget::MatchIn(_, dir) => Some(dir.as_path()),
                _ => None,
            };
            let matches = |pid: u32| {
                procfs.command(pid).is_some_and(|c| {
                    let line = c.line();
                    line.contains(needle.as_str())
                        && dir.is_none_or(|d| works_in_names_or_holds(procfs, pid, &line, d))
                }) && procfs.alive(pid)
            };
            if let Some(pid) = known.filter(|pid| matches(*pid)) {
                return Some(pid);
            }
            // The lowest pid is the one started first: the driver rather than its workers.
            procfs.processes().into_iter().find(|pid| matches(*pid))
        }
    }
}

/// Whether the process works in `dir`, names it in its command line, or has a file in it open.
fn works_in_names_or_holds(procfs: &Procfs, pid: u32, command: &str, dir: &Path) -> bool {
    procfs.cwd(pid).is_some_and(|c| c.starts_with(dir))
        || command.contains(dir.to_string_lossy().as_ref())
        || procfs
            .open_files(pid)
            .is_some_and(|files| files.iter().any(|f| f.target.starts_with(dir)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_real_child_and_not_itself() {
        let marker = format!("pulse-probe-test-{}", std::process::id());
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30; true", &marker])
            .spawn()
            .unwrap();
        // Between fork and exec the child still carries our command line, and the shell's own
        // fork for `sleep` carries the shell's for a moment: look until the shell is found.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let found = loop {
            match find(
                &Procfs::default(),
                &ProcessTarget::Match(marker.clone()),
                None,
            ) {
                Some(pid) if pid == child.id() => break Some(pid),
                other if std::time::Instant::now() >= deadline => break other,
                _ => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        };
        assert_eq!(found, Some(child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            find(&Procfs::default(), &ProcessTarget::Match(marker), None),
            None
        );
    }

    /// Waits until `pids` are all found as matching (between fork and exec a child still
    /// carries our own command line).
    fn wait_matching(marker: &str, pids: &[u32]) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let target = ProcessTarget::Match(marker.to_owned());
        while !pids
            .iter()
            .all(|p| find(&Procfs::default(), &target, Some(*p)) == Some(*p))
        {
            assert!(std::time::Instant::now() < deadline, "children never ran");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn the_known_process_is_kept_while_it_runs() {
        let marker = format!("pulse-probe-known-{}", std::process::id());
        let spawn = || {
            std::process::Command::new("sh")
                .args(["-c", "sleep 30; true", &marker])
                .spawn()
                .unwrap()
        };
        let mut children = [spawn(), spawn()];
        let pids = children.each_ref().map(|c| c.id());
        wait_matching(&marker, &pids);
        let target = ProcessTarget::Match(marker.clone());
        let (low, high) = (pids[0].min(pids[1]), pids[0].max(pids[1]));
        assert_eq!(
            find(&Procfs::default(), &target, None),
            Some(low),
            "a newcomer: the lowest pid"
        );
        assert_eq!(
            find(&Procfs::default(), &target, Some(high)),
            Some(high),
            "the known one stays"
        );
        let high_child = children.iter_mut().find(|c| c.id() == high).unwrap();
        high_child.kill().unwrap();
        high_child.wait().unwrap();
        assert_eq!(
            find(&Procfs::default(), &target, Some(high)),
            Some(low),
            "gone: the other one"
        );
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    #[test]
    fn pid_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run.pid");
        assert_eq!(
            find(
                &Procfs::default(),
                &ProcessTarget::PidFile(file.clone()),
                None
            ),
            None
        );
        std::fs::write(&file, format!("{}\n", std::process::id())).unwrap();
        assert_eq!(
            find(
                &Procfs::default(),
                &ProcessTarget::PidFile(file.clone()),
                None
            ),
            Some(std::process::id())
        );
        std::fs::write(&file, "not a pid").unwrap();
        assert_eq!(
            find(&Procfs::default(), &ProcessTarget::PidFile(file), None),
            None
        );
    }
}
