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
