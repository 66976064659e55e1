//! Where a stuck run waits: the Python stacks of the driver and of the inference server's
//! processes, captured with py-spy when an alert about a stall fires, or on demand, and read
//! into one line per process a person reads first (docs/alerts.md#stacks).
//!
//! The capture ([`capture`]) is the I/O edge: py-spy as a child process under a deadline, the
//! process's state, its source lines and its connections. The reading ([`read`]) is pure, so
//! every summary is unit-tested on real dumps kept in `tests/testdata/stacks/`.

pub mod capture;
pub mod read;
pub mod targets;

pub use crate::model::stacks::{Captures, Frame, ProcessStacks, Thread, Verdict, Wait, DRIVER};

/// The full dumps as text, in py-spy's own layout, each process under its summary; cut at
/// `cap` bytes.
pub fn dump(captures: &Captures, cap: usize) -> String {
    let mut out = String::new();
    for p in &captures.processes {
        out += &format!(
            "Process {} ({}) at {}\n",
            p.pid,
            p.role,
            crate::human::utc(p.at)
        );
        out += &format!("  {}\n", p.summary);
        if let Some(note) = &p.note {
            out += &format!("  note: {note}\n");
        }
        for (to, n) in &p.connections {
            out += &format!("  {n} connection(s) to {to}\n");
        }
        for t in &p.threads {
            let state = if t.active { "active" } else { "idle" };
            out += &format!(
                "\nThread {} ({state}): {:?}\n",
                t.id,
                t.name.as_deref().unwrap_or("")
            );
            for f in &t.frames {
                out += &format!(
                    "    {} ({}:{})\n",
                    f.name,
                    read::short_file(&f.file),
                    f.line
                );
                if let Some(code) = &f.code {
                    out += &format!("        {}\n", code.trim());
                }
            }
        }
        out += "\n";
    }
    if out.len() > cap {
        let mut end = cap;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out += &format!("\n[cut at {cap} bytes]\n");
    }
    out
}
