//! One way to take a lock, and one way to publish a snapshot. The ground floor: it uses
//! nothing of the crate.
//!
//! A lock whose holder panicked is taken all the same. What it guards is plain data that every
//! holder leaves whole between statements, and a sidecar that stopped serving because one
//! source panicked would be half-dead: up for its supervisor, blind for its users.

use std::sync::{Arc, Mutex, MutexGuard};

pub trait Locked<T> {
    /// The guard, whether or not an earlier holder panicked.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A value its one writer publishes and others read as a snapshot: a reader takes the current
/// version (an `Arc`, one short lock) and holds no lock while it uses it; the writer changes
/// its own copy, or the value in place where no reader holds it, and every later reader sees
/// the change.
#[derive(Debug, Default)]
pub struct Published<T>(Arc<Mutex<Arc<T>>>);

impl<T> Clone for Published<T> {
    fn clone(&self) -> Self {
        Published(self.0.clone())
    }
}

impl<T: Clone> Published<T> {
    pub fn new(value: T) -> Published<T> {
        Published(Arc::new(Mutex::new(Arc::new(value))))
    }

    /// The value as last published.
    pub fn get(&self) -> Arc<T> {
        self.0.locked().clone()
    }

    /// Changes the value and publishes it.
    pub fn update<R>(&self, change: impl FnOnce(&mut T) -> R) -> R {
        let mut current = self.0.locked();
        change(Arc::make_mut(&mut current))
    }
}

#[cfg(test)]
mod tests {
    use super::Published;

    #[test]
    fn a_snapshot_taken_stays_as_it_was_and_later_readers_see_the_update() {
        let published = Published::new(vec![1]);
        let before = published.get();
        published.update(|v| v.push(2));
        assert_eq!(*before, [1]);
        assert_eq!(*published.get(), [1, 2]);
        assert_eq!(*published.clone().get(), [1, 2]);
    }
}
