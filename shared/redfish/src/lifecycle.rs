//! The lifecycle API client (decommissioning). Flow defines this small HTTP
//! API; the rack simulator implements it, and a site adapter can put it in
//! front of a real inventory system:
//!
//! * `GET  {base}/racks/{rack}/components/{component}` →
//!   `200 {"rack", "component", "state", "updated_at"}`, where `state` is
//!   `Ready`, `Maintenance(<reason>)`, `Decommissioning/<phase>` or
//!   `Decommissioned`; `404` for an unknown component.
//! * `POST {base}/racks/{rack}/components/{component}/decommission` →
//!   `202` (started) or `200` (already decommissioning or decommissioned)
//!   with the same body. Idempotent.
//!
//! `{base}` is e.g. `http://127.0.0.1:8800/lifecycle/v1`. HTTP Basic auth
//! with a credential reference of the worker's configuration.

use std::sync::Arc;

use serde::Deserialize;

use flow_hardware::{ComponentTarget, DecommissionState, HardwareError};
use flow_rules::defaults::LIFECYCLE_CALL_TIMEOUT;

use crate::credentials::CredentialStore;

/// Client of the lifecycle API.
#[derive(Clone)]
pub struct LifecycleClient {
    base: String,
    http: reqwest::Client,
    credentials: Arc<CredentialStore>,
    credential_ref: String,
}

#[derive(Deserialize)]
struct StateBody {
    state: String,
}

impl LifecycleClient {
    /// A client of the API at `base`, authenticating with `credential_ref`
    /// from `credentials` (empty reference: no authentication).
    pub fn new(
        base: &str,
        http: reqwest::Client,
        credentials: Arc<CredentialStore>,
        credential_ref: &str,
    ) -> Self {
        LifecycleClient {
            base: base.trim_end_matches('/').to_owned(),
            http,
            credentials,
            credential_ref: credential_ref.to_owned(),
        }
    }

    fn url(&self, target: &ComponentTarget, suffix: &str) -> String {
        format!(
            "{}/racks/{}/components/{}{suffix}",
            self.base, target.rack, target.name
        )
    }

    async fn call(
        &self,
        target: &ComponentTarget,
        request: reqwest::RequestBuilder,
        action: &str,
        url: &str,
    ) -> Result<DecommissionState, HardwareError> {
        let mut request = request.timeout(LIFECYCLE_CALL_TIMEOUT);
        if !self.credential_ref.is_empty() {
            let cred = self.credentials.get(&self.credential_ref).ok_or_else(|| {
                HardwareError::MissingCredential {
                    component: target.name.clone(),
                    reference: self.credential_ref.clone(),
                }
            })?;
            request = request.basic_auth(&cred.user, Some(cred.password.expose()));
        }
        let response = request.send().await.map_err(|e| {
            let (component, url, detail) = (target.name.clone(), url.to_owned(), e.to_string());
            if e.is_connect() {
                HardwareError::Unreachable {
                    component,
                    url,
                    detail,
                }
            } else {
                // Sent, unanswered: the API is idempotent, so the
                // repeat a retry makes is harmless.
                HardwareError::NoAnswer {
                    component,
                    url,
                    detail,
                }
            }
        })?;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        if !(200..300).contains(&status) {
            return Err(HardwareError::Http {
                component: target.name.clone(),
                action: action.to_owned(),
                status,
                message: crate::conn::errors::error_message(&text),
            });
        }
        let body: StateBody = serde_json::from_str(&text).map_err(|e| HardwareError::Protocol {
            component: target.name.clone(),
            action: action.to_owned(),
            detail: format!("{e}: {}", crate::conn::errors::snippet(&text)),
        })?;
        Ok(DecommissionState::parse(&body.state))
    }

    /// Requests decommissioning.
    pub async fn decommission(
        &self,
        target: &ComponentTarget,
    ) -> Result<DecommissionState, HardwareError> {
        let url = self.url(target, "/decommission");
        self.call(target, self.http.post(&url), "decommission", &url)
            .await
    }

    /// Reads the state.
    pub async fn status(
        &self,
        target: &ComponentTarget,
    ) -> Result<DecommissionState, HardwareError> {
        let url = self.url(target, "");
        self.call(target, self.http.get(&url), "decommission status", &url)
            .await
    }
}
