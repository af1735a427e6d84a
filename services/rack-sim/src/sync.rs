//! Mutex helper: a poisoned lock still yields its data (the simulator's
//! state stays usable after a panic elsewhere; no unwrap on request paths).

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, ignoring poisoning.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
