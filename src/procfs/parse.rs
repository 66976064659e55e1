//! What the files of `/proc` say, read from their text: pure, so that a line a kernel or a
//! process writes oddly is tested without one.

/// The fields of `/proc/PID/stat` the sidecar uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `D`, `Z`, `T`…
    pub state: char,
    pub ppid: u32,
    /// The kernel's process flags (`PF_*`).
    pub flags: u32,
    /// When the process started, in clock ticks after boot (field 22): with the pid, what
    /// tells a process from a later one given the same pid. `None` on a short line.
    pub started: Option<u64>,
}

/// The kernel's flag for its own threads (`PF_KTHREAD`).
const KERNEL_THREAD: u32 = 0x0020_0000;

impl Stat {
    /// Running, not a zombie waiting to be reaped (nor one being torn down).
    pub fn alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }

    pub fn kernel_thread(&self) -> bool {
        self.flags & KERNEL_THREAD != 0
    }
}

/// The fields follow the command name, which may hold spaces, parentheses and bytes that are
/// not UTF-8 (a name a process gave itself): they start after its last `)`.
pub fn parse_stat(stat: &[u8]) -> Option<Stat> {
    let rest = &stat[stat.iter().rposition(|b| *b == b')')? + 1..];
    let fields: Vec<&str> = std::str::from_utf8(rest).ok()?.split_whitespace().collect();
    // Field N of the line is fields[N - 3]: the state is field 3.
    let field = |n: usize| fields.get(n - 3).copied();
    Some(Stat {
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        flags: field(9)?.parse().ok()?,
        started: field(22).and_then(|s| s.parse().ok()),
    })
}

/// The pids of an `NSpid:` line (`NSpid:\t4000123\t5`: 4000123 in the namespace of the
/// `/proc` read, 5 in the process's own).
pub fn nspid(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let pids: Option<Vec<u32>> = line.split_whitespace().map(|p| p.parse().ok()).collect();
    pids.filter(|p| !p.is_empty())
}

/// `environ`'s `NAME=value` pairs, NUL-separated; an entry without `=` is left out.
pub fn environ(raw: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(raw)
        .split('\0')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Whether `fdinfo`'s `flags:` (octal) say the file is open for writing.
pub fn writable(fdinfo: &str) -> bool {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32)
}

/// `/proc/stat`'s boot time (`btime`), in Unix seconds.
pub fn boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}
