use super::*;

fn triple(stat: &[u8]) -> Option<(char, u32, u32)> {
    parse_stat(stat).map(|s| (s.state, s.ppid, s.flags))
}

#[test]
fn stat_is_read_whatever_the_name_holds() {
    assert_eq!(
        triple(b"7 (\xff\xfe) S 1 7 7 0 -1 4194560 0"),
        Some(('S', 1, 4194560))
    );
    assert_eq!(
        triple(b"9 (a (b) c) R 3 9 9 0 -1 4194304 0"),
        Some(('R', 3, 4194304))
    );
    assert_eq!(triple(b"garbage"), None);
}

#[test]
fn a_start_time_is_field_22_whatever_the_name_holds() {
    let stat = b"9 (a (b) c) S 1 9 9 0 -1 4194560 10 0 0 0 5 3 0 0 20 0 1 0 123456 1000 10";
    assert_eq!(parse_stat(stat).and_then(|s| s.started), Some(123_456));
    assert_eq!(parse_stat(b"9 (x) S 1 9").and_then(|s| s.started), None);
    let me = std::process::id();
    let start_ticks = |pid| Procfs::default().stat(pid).and_then(|s| s.started);
    assert!(start_ticks(me).is_some_and(|t| t > 0));
    assert_eq!(
        start_ticks(me),
        start_ticks(me),
        "the same process, the same start"
    );
}

fn stat(state: char, ppid: u32, flags: u32) -> Option<Stat> {
    Some(Stat {
        state,
        ppid,
        flags,
        started: None,
    })
}

fn args(s: &str) -> Vec<String> {
    s.split(' ').map(str::to_owned).collect()
}

#[test]
fn a_process_met_inside_execve_is_read_once_its_command_line_is_back() {
    let mut reads = vec![
        b"".to_vec(),
        b"".to_vec(),
        b"python3\0-c\0x\0sglang.launch_server\0".to_vec(),
    ]
    .into_iter();
    let got = command_of(|| reads.next(), || stat('R', 100, 0x0040_0100), || {});
    assert_eq!(
        got,
        Some(Command {
            args: args("python3 -c x sglang.launch_server"),
            ppid: 100
        })
    );
    // A kernel thread and a zombie are passed by; so is one whose line never comes back.
    assert_eq!(
        command_of(|| Some(Vec::new()), || stat('S', 2, 0x0020_8040), || {}),
        None
    );
    assert_eq!(
        command_of(|| Some(b"x\0".to_vec()), || stat('Z', 2, 0), || {}),
        None
    );
    assert_eq!(
        command_of(|| Some(Vec::new()), || stat('R', 2, 0), || {}),
        None
    );
}

#[test]
fn nspid_lines_read_from_this_namespace_down() {
    let status =
        "Name:\tpython3\nTgid:\t4000123\nPid:\t4000123\nNSpid:\t4000123\t5\nNSpgid:\t4000123\t5\n";
    assert_eq!(nspid(status), Some(vec![4000123, 5]));
    assert_eq!(nspid("Name:\tinit\nNSpid:\t1\n"), Some(vec![1]));
    assert_eq!(nspid("Name:\told kernel\nPid:\t7\n"), None);
    assert_eq!(nspid("NSpid:\t\n"), None);
    assert_eq!(nspid("NSpid:\t12\tx\n"), None);
}

#[test]
fn fdinfo_flags_say_what_is_open_for_writing() {
    assert!(parse::writable("pos:\t0\nflags:\t0102001\nmnt_id:\t25\n"));
    assert!(!parse::writable("pos:\t0\nflags:\t0100000\n"));
    assert!(parse::writable("flags:\t02\n"));
}

#[test]
fn boot_time_line() {
    assert_eq!(
        parse::boot_time("cpu 1 2 3\nbtime 1700000000\n"),
        Some(1.7e9)
    );
    assert_eq!(parse::boot_time("cpu 1 2 3\n"), None);
}

#[test]
fn an_environment_is_its_pairs() {
    assert_eq!(
        environ(b"SLURM_JOB_ID=7\0odd\0A=b=c\0"),
        [
            ("SLURM_JOB_ID".into(), "7".into()),
            ("A".into(), "b=c".into())
        ]
    );
}

/// A tree laid out like `/proc`: the sidecar (`self`) is not listed, a kernel thread and a
/// zombie have no command, and nothing outside the root is read.
#[test]
fn a_moved_root_is_read_and_the_sidecar_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let process = |pid: u32, state: char, flags: u32, cmdline: &[u8]| {
        let base = root.join(pid.to_string());
        std::fs::create_dir_all(base.join("fd")).unwrap();
        std::fs::write(
            base.join("stat"),
            format!("{pid} (p) {state} 1 {pid} {pid} 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 77 1 1"),
        )
        .unwrap();
        std::fs::write(base.join("cmdline"), cmdline).unwrap();
    };
    process(2, 'S', 0x0020_8040, b"");
    process(10, 'S', 0x0040_0100, b"python3\0gen.py\0");
    process(11, 'Z', 0x0040_0100, b"");
    process(9, 'S', 0x0040_0100, b"pipeline-pulse\0");
    std::os::unix::fs::symlink("9", root.join("self")).unwrap();
    std::os::unix::fs::symlink("/data/run", root.join("10/cwd")).unwrap();
    std::os::unix::fs::symlink("socket:[7]", root.join("10/fd/3")).unwrap();
    let procfs = Procfs::at(root);
    assert_eq!(procfs.processes(), [2, 10, 11]);
    assert_eq!(procfs.command(2), None, "a kernel thread");
    assert_eq!(procfs.command(11), None, "a zombie");
    assert!(!procfs.alive(11) && procfs.exists(11));
    let command = procfs.command(10).unwrap();
    assert_eq!(
        (command.line().as_str(), command.ppid),
        ("python3 gen.py", 1)
    );
    assert_eq!(procfs.stat(10).and_then(|s| s.started), Some(77));
    assert_eq!(procfs.cwd(10), Some("/data/run".into()));
    assert_eq!(
        procfs.open_files(10),
        Some(vec![OpenFile {
            fd: "3".into(),
            target: "socket:[7]".into()
        }])
    );
    assert_eq!(procfs.open_files(12), None);
    assert!(procfs.tcp_tables(None).is_empty());
}
