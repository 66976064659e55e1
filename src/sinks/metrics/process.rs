//! The sidecar's own `process_*` metrics, read from `/proc/self` as the Go and Python clients do.
//!
//! Every field is optional: on a system without procfs the family is simply absent. They are
//! read at each scrape, as those clients read them, through [`Procfs`].

use crate::procfs::Procfs;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: Option<f64>,
    pub resident_memory_bytes: Option<f64>,
    pub virtual_memory_bytes: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
    pub start_time_seconds: Option<f64>,
}

impl ProcessStats {
    pub fn read() -> ProcessStats {
        let mut stats = ProcessStats::read_in(&Procfs::default(), ticks_per_second(), page_size());
        stats.max_fds = max_fds();
        stats
    }

    /// What `procfs` says of the sidecar, with the clock ticks per second and the page size
    /// its figures count in. The limit of open files is not in `/proc`: it is left out.
    pub fn read_in(procfs: &Procfs, ticks: f64, page: f64) -> ProcessStats {
        let mut stats = procfs
            .own_stat()
            .zip(procfs.boot_time())
            .map(|(stat, boot)| from_stat(&stat, boot, ticks, page))
            .unwrap_or_default();
        stats.open_fds = procfs.own_open_fds().map(|n| n as f64);
        stats
    }
}

/// Parses `/proc/self/stat`. The command name (field 2) may contain spaces and parentheses,
/// so fields are counted from the last `)`.
fn from_stat(stat: &str, boot_time: f64, ticks: f64, page: f64) -> ProcessStats {
    let Some(after_comm) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return ProcessStats::default();
    };
    // after_comm starts at field 3 (state); field N is at index N - 3.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
    ProcessStats {
        cpu_seconds: field(14)
            .zip(field(15))
            .map(|(user, system)| (user + system) / ticks),
        start_time_seconds: field(22).map(|start| boot_time + start / ticks),
        virtual_memory_bytes: field(23),
        resident_memory_bytes: field(24).map(|pages| pages * page),
        ..ProcessStats::default()
    }
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn page_size() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as f64
    } else {
        4096.0
    }
}

fn max_fds() -> Option<f64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    (ok && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_the_name() {
        let stat = "4242 (pipe (pulse) x) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 9 0 1000 123456789 2048 18446744073709551615";
        let s = from_stat(stat, 1_700_000_000.0, 100.0, 4096.0);
        assert_eq!(s.cpu_seconds, Some(3.0));
        assert_eq!(s.start_time_seconds, Some(1_700_000_010.0));
        assert_eq!(s.virtual_memory_bytes, Some(123456789.0));
        assert_eq!(s.resident_memory_bytes, Some(2048.0 * 4096.0));
    }

    /// The sidecar as pid 9 of a container's `/proc` (`tests/testdata/proc/container`), in
    /// 100 ticks a second and 4 KiB pages.
    #[test]
    fn reads_a_fixture_tree_as_its_golden_says() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/testdata/proc/container");
        let s = ProcessStats::read_in(&Procfs::at(root), 100.0, 4096.0);
        let got = format!(
            "cpu_seconds {:?}\nresident_memory_bytes {:?}\nvirtual_memory_bytes {:?}\nopen_fds {:?}\nstart_time_seconds {:?}\n",
            s.cpu_seconds,
            s.resident_memory_bytes,
            s.virtual_memory_bytes,
            s.open_fds,
            s.start_time_seconds
        );
        crate::testing::golden("tests/testdata/proc/container.metrics.golden", &got);
        let nothing = ProcessStats::read_in(&Procfs::at("/nonexistent"), 100.0, 4096.0);
        assert_eq!(nothing, ProcessStats::default(), "no procfs, no figures");
    }

    #[test]
    fn reads_this_process() {
        let s = ProcessStats::read();
        assert!(s.resident_memory_bytes.unwrap() > 0.0);
        assert!(s.open_fds.unwrap() >= 1.0);
        assert!(s.start_time_seconds.unwrap() > 1e9);
    }
}
