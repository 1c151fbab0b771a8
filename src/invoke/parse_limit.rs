//! How many large request bodies are read into values at once. Parsing
//! a payload builds a tree of about ten times its text (a 1 MiB JSON
//! body: some 11 MiB), which lives until the values are made: 24 such
//! requests at once reached 230 MiB. The parse is CPU work, so one at a
//! time per core loses no throughput; the others wait for a permit with
//! their body only.

use std::sync::{Condvar, Mutex, MutexGuard};

/// Bodies from this size on take a permit.
pub const LARGE_BODY: usize = 64 << 10;

/// Permits in use, and the signal that one came free.
static IN_USE: Mutex<usize> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// A parse permit, given back when dropped.
pub struct Permit(());

impl Drop for Permit {
    fn drop(&mut self) {
        *lock() -= 1;
        FREED.notify_one();
    }
}

fn lock() -> MutexGuard<'static, usize> {
    IN_USE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A permit for reading a body of `len` bytes into values: `None` for a
/// small body; for a large one, waits until fewer than one per core are
/// in use.
pub fn permit(len: usize) -> Option<Permit> {
    if len < LARGE_BODY {
        return None;
    }
    let most = crate::sys::cores().max(1);
    let mut used = lock();
    while *used >= most {
        used = FREED.wait(used).unwrap_or_else(|e| e.into_inner());
    }
    *used += 1;
    Some(Permit(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bodies_need_no_permit_and_permits_come_back() {
        assert!(permit(LARGE_BODY - 1).is_none());
        let held: Vec<_> = (0..crate::sys::cores())
            .map(|_| permit(LARGE_BODY))
            .collect();
        assert!(held.iter().all(Option::is_some));
        drop(held);
        assert!(permit(LARGE_BODY).is_some());
    }
}
