//! Which redirects a BMC request follows.

use url::Url;

/// Redirects are followed only within the BMC's own origin (scheme, host
/// and port), at most [`MAX_REDIRECTS`] in a row: a service that serves its
/// root only at `/redfish/v1/` answers `/redfish/v1` with a `308`
/// (DSP0266 names both URIs), and credentials never leave the origin.
pub(crate) fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().cloned();
        if attempt.previous().len() > MAX_REDIRECTS {
            attempt.stop()
        } else if first.is_some_and(|from| same_origin(&from, attempt.url())) {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// How many redirects in a row a request follows.
const MAX_REDIRECTS: usize = 3;

/// Whether two URLs share scheme, host and port.
pub(super) fn same_origin(a: &Url, b: &Url) -> bool {
    a.origin() == b.origin()
}
