//! Redfish sessions of every BMC: created by a login, named by a token the
//! client sends as `X-Auth-Token`, ended by a logout or by the admin API
//! (`POST /admin/v1/sessions/expire`, a BMC dropping its sessions as a
//! reboot or a timeout does).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::Rng;

use crate::sync::lock;
use crate::world::ComponentRef;

/// One open session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    /// Its number, the last segment of its URI.
    pub(crate) id: u64,
    /// The `X-Auth-Token`.
    pub(crate) token: String,
    /// Who logged in.
    pub(crate) user: String,
}

/// Every BMC's open sessions, and the logins since start.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    open: Mutex<HashMap<ComponentRef, Vec<Session>>>,
    next: AtomicU64,
    logins: AtomicU64,
}

impl Sessions {
    /// A new session at the BMC `at` for `user`.
    pub(crate) fn create(&self, at: ComponentRef, user: &str) -> Session {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let token: String = {
            let mut rng = rand::rng();
            (0..32)
                .map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap_or('0'))
                .collect()
        };
        let session = Session {
            id,
            token,
            user: user.to_owned(),
        };
        self.logins.fetch_add(1, Ordering::Relaxed);
        lock(&self.open)
            .entry(at)
            .or_default()
            .push(session.clone());
        session
    }

    /// Whether `token` names an open session of the BMC `at`.
    pub(crate) fn valid(&self, at: ComponentRef, token: &str) -> bool {
        lock(&self.open)
            .get(&at)
            .is_some_and(|s| s.iter().any(|s| s.token == token))
    }

    /// The open sessions of the BMC `at`.
    pub(crate) fn list(&self, at: ComponentRef) -> Vec<Session> {
        lock(&self.open).get(&at).cloned().unwrap_or_default()
    }

    /// Ends session `id` of the BMC `at`; whether it was open.
    pub(crate) fn remove(&self, at: ComponentRef, id: u64) -> bool {
        let mut open = lock(&self.open);
        let Some(list) = open.get_mut(&at) else {
            return false;
        };
        let before = list.len();
        list.retain(|s| s.id != id);
        before != list.len()
    }

    /// Ends every session of the BMC `at` (it went down).
    pub(crate) fn drop_bmc(&self, at: ComponentRef) {
        lock(&self.open).remove(&at);
    }

    /// Ends every session of every BMC; how many there were.
    pub(crate) fn expire_all(&self) -> usize {
        let mut open = lock(&self.open);
        let n = open.values().map(Vec::len).sum();
        open.clear();
        n
    }

    /// Sessions open now, across every BMC.
    pub(crate) fn open_count(&self) -> usize {
        lock(&self.open).values().map(Vec::len).sum()
    }

    /// Logins since start.
    pub(crate) fn logins(&self) -> u64 {
        self.logins.load(Ordering::Relaxed)
    }
}
