//! Finding the pipeline's driver process: by a piece of its command line, or by a pid file.

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

/// The pid of the running target, if any. Zombies are not running; the sidecar itself, whose
/// own command line holds the match text, is never the target. `known`, the pid found last
/// time, is kept while it still matches: a second matching process started later does not
/// take its place, even when pids have wrapped around and the newcomer's is lower.
pub fn find(target: &ProcessTarget, known: Option<u32>) -> Option<u32> {
    match target {
        ProcessTarget::PidFile(path) => {
            let pid = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
            alive(pid).then_some(pid)
        }
        ProcessTarget::Match(needle) | ProcessTarget::MatchIn(needle, _) => {
            let dir = match target {
                ProcessTarget::MatchIn(_, dir) => Some(dir.as_path()),
                _ => None,
            };
            let matches = |pid: u32| {
                cmdline(pid).is_some_and(|c| {
                    c.contains(needle.as_str()) && dir.is_none_or(|d| tied(pid, &c, d))
                }) && alive(pid)
            };
            if let Some(pid) = known.filter(|pid| matches(*pid)) {
                return Some(pid);
            }
            let me = std::process::id();
            let mut pids: Vec<u32> = std::fs::read_dir("/proc")
                .ok()?
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter(|pid| *pid != me)
                .collect();
            // The lowest pid is the one started first: the driver rather than its workers.
            pids.sort_unstable();
            pids.into_iter().find(|pid| matches(*pid))
        }
    }
}

/// Whether the process works in `dir`, names it in its command line, or has a file in it open.
fn tied(pid: u32, command: &str, dir: &Path) -> bool {
    let base = PathBuf::from(format!("/proc/{pid}"));
    std::fs::read_link(base.join("cwd")).is_ok_and(|c| c.starts_with(dir))
        || command.contains(dir.to_string_lossy().as_ref())
        || std::fs::read_dir(base.join("fd")).is_ok_and(|fds| {
            fds.flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t.starts_with(dir)))
        })
}

fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let joined: Vec<u8> = raw
        .strip_suffix(b"\0")
        .unwrap_or(&raw)
        .iter()
        .map(|&b| if b == 0 { b' ' } else { b })
        .collect();
    Some(String::from_utf8_lossy(&joined).into_owned())
}

/// Running, not a zombie waiting to be reaped.
fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z' && state != 'X')
}

/// The state letter and the parent pid from `/proc/PID/stat`.
pub fn stat(pid: u32) -> Option<(char, u32)> {
    stat_flags(pid).map(|(state, ppid, _)| (state, ppid))
}

/// The state letter, the parent pid and the kernel's process flags from `/proc/PID/stat`.
pub fn stat_flags(pid: u32) -> Option<(char, u32, u32)> {
    parse_stat(&std::fs::read(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?)
}

/// When the process started, in clock ticks after boot (`/proc/PID/stat`'s field 22): with the
/// pid, what tells a process from a later one given the same pid.
pub fn start_ticks(pid: u32) -> Option<u64> {
    parse_start(&std::fs::read(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?)
}

/// `/proc/PID/stat`'s start time (field 22), read after the command name as [`parse_stat`]
/// reads its fields.
pub fn parse_start(stat: &[u8]) -> Option<u64> {
    let rest = &stat[stat.iter().rposition(|b| *b == b')')? + 1..];
    // state is field 3: the start time is the 20th after the name.
    std::str::from_utf8(rest)
        .ok()?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The fields follow the command name, which may hold spaces, parentheses and bytes that are
/// not UTF-8 (a name a process gave itself): they start after its last `)`.
pub fn parse_stat(stat: &[u8]) -> Option<(char, u32, u32)> {
    let rest = &stat[stat.iter().rposition(|b| *b == b')')? + 1..];
    let mut fields = std::str::from_utf8(rest).ok()?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    // pgrp, session, tty_nr, tpgid, then flags.
    let flags = fields.nth(4)?.parse().ok()?;
    Some((state, ppid, flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_is_read_whatever_the_name_holds() {
        assert_eq!(
            parse_stat(b"7 (\xff\xfe) S 1 7 7 0 -1 4194560 0"),
            Some(('S', 1, 4194560))
        );
        assert_eq!(
            parse_stat(b"9 (a (b) c) R 3 9 9 0 -1 4194304 0"),
            Some(('R', 3, 4194304))
        );
        assert_eq!(parse_stat(b"garbage"), None);
    }

    #[test]
    fn a_start_time_is_field_22_whatever_the_name_holds() {
        let stat = b"9 (a (b) c) S 1 9 9 0 -1 4194560 10 0 0 0 5 3 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(parse_start(stat), Some(123_456));
        assert_eq!(parse_start(b"9 (x) S 1 9"), None);
        let me = std::process::id();
        assert!(start_ticks(me).is_some_and(|t| t > 0));
        assert_eq!(
            start_ticks(me),
            start_ticks(me),
            "the same process, the same start"
        );
    }

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
            match find(&ProcessTarget::Match(marker.clone()), None) {
                Some(pid) if pid == child.id() => break Some(pid),
                other if std::time::Instant::now() >= deadline => break other,
                _ => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        };
        assert_eq!(found, Some(child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(find(&ProcessTarget::Match(marker), None), None);
    }

    /// Waits until `pids` are all found as matching (between fork and exec a child still
    /// carries our own command line).
    fn wait_matching(marker: &str, pids: &[u32]) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let target = ProcessTarget::Match(marker.to_owned());
        while !pids.iter().all(|p| find(&target, Some(*p)) == Some(*p)) {
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
        assert_eq!(find(&target, None), Some(low), "a newcomer: the lowest pid");
        assert_eq!(find(&target, Some(high)), Some(high), "the known one stays");
        let high_child = children.iter_mut().find(|c| c.id() == high).unwrap();
        high_child.kill().unwrap();
        high_child.wait().unwrap();
        assert_eq!(find(&target, Some(high)), Some(low), "gone: the other one");
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    #[test]
    fn pid_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run.pid");
        assert_eq!(find(&ProcessTarget::PidFile(file.clone()), None), None);
        std::fs::write(&file, format!("{}\n", std::process::id())).unwrap();
        assert_eq!(
            find(&ProcessTarget::PidFile(file.clone()), None),
            Some(std::process::id())
        );
        std::fs::write(&file, "not a pid").unwrap();
        assert_eq!(find(&ProcessTarget::PidFile(file), None), None);
    }
}
