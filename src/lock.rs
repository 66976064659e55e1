//! One way to take a lock. The ground floor: it uses nothing of the crate.
//!
//! A lock whose holder panicked is taken all the same. What it guards is plain data that every
//! holder leaves whole between statements, and a sidecar that stopped serving because one
//! source panicked would be half-dead: up for its supervisor, blind for its users.

use std::sync::{Mutex, MutexGuard};

pub trait Locked<T> {
    /// The guard, whether or not an earlier holder panicked.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|e| e.into_inner())
    }
}
