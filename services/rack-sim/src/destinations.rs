//! The event destinations of every BMC: one per open SSE stream, created
//! when the stream opens and removed when it ends (DSP0266 "Server-sent
//! events": the service represents each open stream by an EventDestination
//! in the EventService's `Subscriptions`; deleting that EventDestination
//! closes the stream). The simulator takes no push subscriptions, so these
//! are the only destinations.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

use crate::sync::lock;
use crate::world::ComponentRef;

/// One open SSE stream, as its EventDestination shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destination {
    /// Its number, the last segment of its URI.
    pub(crate) id: u64,
    /// The client's address (`Destination` is `redfish-sse://<peer>`), if
    /// the listener knew it.
    pub(crate) peer: Option<SocketAddr>,
    /// The service-generated opaque `Context`.
    pub(crate) context: String,
}

/// Every BMC's open SSE streams.
#[derive(Debug, Default)]
pub(crate) struct Destinations {
    open: Mutex<HashMap<ComponentRef, Vec<Destination>>>,
    next: AtomicU64,
    /// Bumped when a client deletes a destination: every open stream looks
    /// whether it is still listed, and ends if not.
    deleted: watch::Sender<u64>,
}

impl Destinations {
    /// Registers a stream just opened at the BMC `at` by `peer`.
    pub(crate) fn open(&self, at: ComponentRef, peer: Option<SocketAddr>) -> Destination {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let destination = Destination {
            id,
            peer,
            context: format!("{:016x}", rand::random::<u64>()),
        };
        lock(&self.open)
            .entry(at)
            .or_default()
            .push(destination.clone());
        destination
    }

    /// A client deletes destination `id` of the BMC `at`: its stream is to
    /// end. Whether it was listed.
    pub(crate) fn delete(&self, at: ComponentRef, id: u64) -> bool {
        let listed = self.list(at).iter().any(|d| d.id == id);
        if listed {
            self.close(at, id);
            self.deleted.send_modify(|n| *n = n.wrapping_add(1));
        }
        listed
    }

    /// Changes with every [`Destinations::delete`].
    pub(crate) fn deletions(&self) -> watch::Receiver<u64> {
        self.deleted.subscribe()
    }

    /// Whether destination `id` of the BMC `at` is listed.
    pub(crate) fn is_open(&self, at: ComponentRef, id: u64) -> bool {
        lock(&self.open)
            .get(&at)
            .is_some_and(|list| list.iter().any(|d| d.id == id))
    }

    /// Removes stream `id` of the BMC `at` (it ended).
    pub(crate) fn close(&self, at: ComponentRef, id: u64) {
        let mut open = lock(&self.open);
        if let Some(list) = open.get_mut(&at) {
            list.retain(|d| d.id != id);
            if list.is_empty() {
                open.remove(&at);
            }
        }
    }

    /// The open streams of the BMC `at`, oldest first.
    pub(crate) fn list(&self, at: ComponentRef) -> Vec<Destination> {
        lock(&self.open).get(&at).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_listed_per_bmc_until_closed() {
        let destinations = Destinations::default();
        let a = ComponentRef {
            rack: 0,
            component: 1,
        };
        let b = ComponentRef {
            rack: 0,
            component: 2,
        };
        let first = destinations.open(a, None);
        let second = destinations.open(a, "127.0.0.1:4000".parse().ok());
        let other = destinations.open(b, None);
        assert_ne!(first.id, second.id);
        assert_ne!(first.context, second.context);
        assert_eq!(destinations.list(a), [first.clone(), second.clone()]);
        let deletions = destinations.deletions();
        assert!(destinations.delete(a, first.id));
        assert!(deletions.has_changed().unwrap_or(false));
        assert!(!destinations.delete(a, first.id));
        assert!(!destinations.is_open(a, first.id));
        assert!(destinations.is_open(a, second.id));
        assert_eq!(destinations.list(a), std::slice::from_ref(&second));
        assert_eq!(destinations.list(b), [other]);
        destinations.close(a, second.id);
        assert!(destinations.list(a).is_empty());
    }
}
