//! Connections to BMCs: one HTTP client per manager, and per BMC a permit
//! pool (at most N requests at once), the cached nv-redfish service root
//! (read through a repair for roots without `Links`) and the state the
//! layers above keep per BMC ([`BmcHandle::state`]: the power resource
//! discovery found, the event stream). Raw JSON requests go through the
//! same client and credentials, and wait out a `503` that names its
//! `Retry-After`.
//!
//! This is the bottom layer of the crate and knows nothing above it
//! (discovery and events are built on it, the managers on those; `lib.rs`
//! lists the layers). By idea: [`settings`] (limits, timeouts, the HTTP
//! client), [`errors`] (what an answer or a failure means), [`quirks`]
//! (the repairs), [`redirect`] (which redirects are followed), [`pool`]
//! (handles, caps, a request's turn, logouts), [`session`]
//! (authentication and the exchanges); [`Connections`] is what the
//! managers and the watcher share.

pub(crate) mod errors;
mod pool;
mod quirks;
mod redirect;
mod session;
pub(crate) mod settings;

use std::sync::{Arc, Mutex};

use serde_json::Value;

use flow_hardware::{ComponentTarget, HardwareError};

use crate::credentials::BmcCredential;
pub use pool::{BmcPool, RequestCap, Session};
pub use quirks::Bmc;
pub(crate) use redirect::redirect_policy;

/// Where a BMC takes logins when its root does not say otherwise.
pub const SESSIONS_PATH: &str = "/redfish/v1/SessionService/Sessions";
/// The Redfish service root.
pub const ROOT: &str = "/redfish/v1";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The BMC connections of one process: its per-BMC request caps, its
/// whole cap, its sessions and its credentials. Every manager of a
/// registry shares one ([`crate::registry_with`]), and so does anything else
/// that talks to the same BMCs (the hardware watcher), so that the per-BMC
/// cap counts every request, stream and login the process makes there.
#[derive(Clone)]
pub struct Connections {
    pub(crate) pool: BmcPool,
    credentials: Arc<crate::credentials::CredentialStore>,
}

/// An open event stream: its body, and the BMC permit it holds while it
/// lives.
pub struct EventStream<'a> {
    /// The `text/event-stream` response; read its body with `chunk()`.
    pub response: reqwest::Response,
    _session: Session<'a>,
}

impl Connections {
    /// Connections as `settings` describe them, with `credentials`.
    pub fn new(
        settings: &settings::RedfishSettings,
        credentials: Arc<crate::credentials::CredentialStore>,
    ) -> Result<Self, HardwareError> {
        Ok(Connections {
            pool: BmcPool::new(
                settings.http_client()?,
                settings.max_concurrent_per_bmc,
                settings.max_requests.clone(),
            ),
            credentials,
        })
    }

    /// The target's credential.
    pub(crate) fn credential(
        &self,
        target: &ComponentTarget,
    ) -> Result<BmcCredential, HardwareError> {
        self.credentials
            .get(&target.credential_ref)
            .cloned()
            .ok_or_else(|| HardwareError::MissingCredential {
                component: target.name.clone(),
                reference: target.credential_ref.clone(),
            })
    }

    /// A request's turn at the target's BMC (its permit and one of the
    /// whole cap).
    pub(crate) async fn session<'a>(
        &self,
        target: &'a ComponentTarget,
    ) -> Result<Session<'a>, HardwareError> {
        self.pool.session(target, self.credential(target)?).await
    }

    /// GETs `path` at the target's BMC as JSON, within its caps, logged in
    /// as the credential says.
    pub async fn get_json(
        &self,
        target: &ComponentTarget,
        path: &str,
        action: &str,
    ) -> Result<Value, HardwareError> {
        self.session(target).await?.get_json(path, action).await
    }

    /// The target's service root as JSON.
    pub async fn root_json(&self, target: &ComponentTarget) -> Result<Value, HardwareError> {
        self.session(target).await?.root_json().await
    }

    /// Opens the event stream at `path`; it holds one of the BMC's permits
    /// (none of the whole cap) until dropped.
    pub async fn open_stream<'a>(
        &self,
        target: &'a ComponentTarget,
        path: &str,
    ) -> Result<EventStream<'a>, HardwareError> {
        let session = self
            .pool
            .stream_session(target, self.credential(target)?)
            .await?;
        let response = session.open_stream(path).await?;
        Ok(EventStream {
            response,
            _session: session,
        })
    }

    /// Logs out of every session (at shutdown); how many the BMCs accepted.
    pub async fn logout_all(&self) -> usize {
        self.pool.logout_all().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use flow_config::Secret;
    use flow_rules::ComponentType;
    use url::Url;

    use super::quirks::{add_links, drop_bad_release_date, repairs};
    use super::redirect::same_origin;
    use super::session::{resource_of, sessions_link};
    use super::*;

    fn target(url: &str) -> ComponentTarget {
        ComponentTarget {
            rack: "r".into(),
            name: "c".into(),
            component_type: ComponentType::Compute,
            bmc_url: url.into(),
            credential_ref: "x".into(),
            resource_id: None,
        }
    }

    fn cred() -> BmcCredential {
        BmcCredential {
            user: "u".into(),
            password: Secret::new("p"),
            auth: crate::AuthMode::Basic,
        }
    }

    #[test]
    fn repairs_drop_a_release_date_without_an_offset_and_add_missing_links() {
        let member = serde_json::json!({"Id": "BMC", "Version": "1.0", "ReleaseDate": "2017-08-22T12:00:00"});
        let fixed = drop_bad_release_date(member);
        assert!(fixed.get("ReleaseDate").is_none(), "{fixed}");
        assert_eq!(fixed["Version"], "1.0");
        let zero = serde_json::json!({"ReleaseDate": "00:00:00Z"});
        assert!(drop_bad_release_date(zero).get("ReleaseDate").is_none());
        let good = serde_json::json!({"Id": "BMC", "ReleaseDate": "2017-08-22T12:00:00Z"});
        assert_eq!(drop_bad_release_date(good.clone()), good);
        let root = add_links(serde_json::json!({"@odata.id": "/redfish/v1"}));
        assert_eq!(root["Links"]["Sessions"]["@odata.id"], SESSIONS_PATH);
        let linked = serde_json::json!({"Links": {"Sessions": {"@odata.id": "/s"}}});
        assert_eq!(add_links(linked.clone()), linked);
        assert_eq!(repairs().len(), 5);
    }

    #[test]
    fn an_actions_resource_is_the_path_before_actions() {
        assert_eq!(
            resource_of("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"),
            "/redfish/v1/Systems/1"
        );
        assert_eq!(resource_of("/odd/target"), "/odd/target");
    }

    #[test]
    fn redirects_stay_within_the_origin() {
        let u = |s: &str| Url::parse(s).unwrap();
        assert!(same_origin(
            &u("http://127.0.0.1:80/redfish/v1"),
            &u("http://127.0.0.1/redfish/v1/")
        ));
        assert!(!same_origin(
            &u("http://127.0.0.1:8000/a"),
            &u("http://127.0.0.1:8001/a")
        ));
        assert!(!same_origin(&u("https://bmc/a"), &u("http://bmc/a")));
        assert!(!same_origin(&u("https://bmc/a"), &u("https://elsewhere/a")));
    }

    #[test]
    fn logins_go_where_the_root_links_them_else_to_the_default_path() {
        let root = serde_json::json!({"Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions2"}}});
        assert_eq!(sessions_link(&root), "/redfish/v1/SessionService/Sessions2");
        // No Links (some firmware), or a link that is not a path: the default.
        assert_eq!(sessions_link(&serde_json::json!({})), SESSIONS_PATH);
        let odd = serde_json::json!({"Links": {"Sessions": {"@odata.id": "Sessions"}}});
        assert_eq!(sessions_link(&odd), SESSIONS_PATH);
    }

    #[tokio::test]
    async fn at_most_n_sessions_per_bmc_and_bmcs_are_independent() {
        let pool = BmcPool::new(reqwest::Client::new(), 2, RequestCap::new(100));
        let a = target("http://127.0.0.1:1");
        let b = target("http://127.0.0.1:2");
        let s1 = pool.session(&a, cred()).await.unwrap();
        let _s2 = pool.session(&a, cred()).await.unwrap();
        // A third session on the same BMC waits…
        let third = tokio::time::timeout(Duration::from_millis(50), pool.session(&a, cred())).await;
        assert!(third.is_err(), "a third concurrent session was granted");
        // …while another BMC is not affected.
        let _other = pool.session(&b, cred()).await.unwrap();
        // Releasing one lets the next in.
        drop(s1);
        let granted = tokio::time::timeout(Duration::from_secs(5), pool.session(&a, cred())).await;
        assert!(granted.is_ok());
    }

    #[tokio::test]
    async fn the_whole_cap_holds_across_bmcs_and_a_busy_bmc_holds_none_of_it() {
        let cap = RequestCap::new(2);
        let pool = BmcPool::new(reqwest::Client::new(), 1, cap.clone());
        let (a, b, c) = (
            target("http://127.0.0.1:1"),
            target("http://127.0.0.1:2"),
            target("http://127.0.0.1:3"),
        );
        let sa = pool.session(&a, cred()).await.unwrap();
        // A second call to the busy BMC waits for it, not for the cap…
        let waiting_a = tokio::time::timeout(Duration::from_millis(50), pool.session(&a, cred()));
        assert!(waiting_a.await.is_err());
        // …so another BMC still gets the cap's second permit.
        let sb = pool.session(&b, cred()).await.unwrap();
        assert_eq!(cap.in_flight(), 2);
        // The cap is full: a third BMC waits.
        let third = tokio::time::timeout(Duration::from_millis(50), pool.session(&c, cred())).await;
        assert!(third.is_err(), "a call beyond the cap was granted");
        drop(sa);
        let granted = tokio::time::timeout(Duration::from_secs(5), pool.session(&c, cred())).await;
        assert!(granted.is_ok());
        drop(sb);
    }

    #[tokio::test]
    async fn a_malformed_bmc_url_is_a_config_error() {
        let pool = BmcPool::new(reqwest::Client::new(), 1, RequestCap::new(1));
        let bad = target("not a url");
        let e = pool.session(&bad, cred()).await.err().expect("error");
        assert!(e.to_string().contains("is not a URL"), "{e}");
    }
}
