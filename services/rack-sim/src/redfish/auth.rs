//! HTTP Basic credentials check, shared by the BMCs and the lifecycle API.

use axum::http::{HeaderMap, header};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// Whether `headers` carry `Authorization: Basic` with exactly these
/// credentials.
pub(crate) fn basic_auth_ok(headers: &HeaderMap, user: &str, password: &str) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, encoded)) = value.trim().split_once(' ') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return false;
    }
    let Ok(decoded) = STANDARD.decode(encoded.trim()) else {
        return false;
    };
    let Ok(text) = String::from_utf8(decoded) else {
        return false;
    };
    text.split_once(':') == Some((user, password))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(value).expect("header"),
        );
        h
    }

    #[test]
    fn only_the_right_pair_passes() {
        let good = format!("Basic {}", STANDARD.encode("root:0penBmc"));
        assert!(basic_auth_ok(&headers(&good), "root", "0penBmc"));
        let lower = format!("basic {}", STANDARD.encode("root:0penBmc"));
        assert!(basic_auth_ok(&headers(&lower), "root", "0penBmc"));
        let wrong = format!("Basic {}", STANDARD.encode("root:nope"));
        assert!(!basic_auth_ok(&headers(&wrong), "root", "0penBmc"));
        assert!(!basic_auth_ok(&headers("Bearer x"), "root", "0penBmc"));
        assert!(!basic_auth_ok(&HeaderMap::new(), "root", "0penBmc"));
    }
}
