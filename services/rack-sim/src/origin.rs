//! Firmware images: the files the simulator serves as an origin for tests
//! and demos (`PUT /admin/v1/files/<name>`, `GET /files/<name>` on the
//! admin listener), and the fetch a BMC makes of the image URI a
//! SimpleUpdate names — hashed as it comes, so the admin state shows which
//! bytes each update received (`docs/firmware.md`, "Verified bytes only").

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::put;
use axum::{Json, Router};
use serde::Serialize;

use crate::world::World;

/// The largest file the origin keeps or a BMC fetches (bytes).
pub const MAX_FILE_BYTES: usize = 256 << 20;

/// How long a BMC waits for an image before its update fails.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// Files served at `/files/<name>`.
#[derive(Debug, Default)]
pub(crate) struct Files {
    files: Mutex<BTreeMap<String, Bytes>>,
}

/// What a BMC received for an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// `sha256:<hex>` of the bytes received.
    pub digest: String,
    /// How many bytes.
    pub bytes: u64,
}

/// `sha256:<hex>` of `data`.
pub fn sha256(data: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = String::from("sha256:");
    for b in digest.as_ref() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// A file as the origin answers for it.
#[derive(Debug, Serialize)]
struct FileInfo {
    name: String,
    digest: String,
    bytes: u64,
}

/// The origin's routes (on the admin listener).
pub(crate) fn router() -> Router<Arc<World>> {
    Router::new()
        .route("/admin/v1/files/{*name}", put(put_file).delete(delete_file))
        .route("/files/{*name}", axum::routing::get(get_file))
}

async fn put_file(
    State(world): State<Arc<World>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    if body.len() > MAX_FILE_BYTES {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("{name}: {} bytes, above {MAX_FILE_BYTES}\n", body.len()),
        )
            .into_response();
    }
    let info = FileInfo {
        digest: sha256(&body),
        bytes: body.len() as u64,
        name: name.clone(),
    };
    tracing::info!(file = %name, digest = %info.digest, bytes = info.bytes, "origin file put");
    world
        .files
        .files
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name, body);
    Json(info).into_response()
}

async fn delete_file(State(world): State<Arc<World>>, Path(name): Path<String>) -> StatusCode {
    let removed = world
        .files
        .files
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&name);
    if removed.is_some() {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    }
}

async fn get_file(State(world): State<Arc<World>>, Path(name): Path<String>) -> Response {
    let file = world
        .files
        .files
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&name)
        .cloned();
    match file {
        Some(bytes) => (
            [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
            bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, format!("no file {name}\n")).into_response(),
    }
}

/// A BMC's HTTP client for image URIs.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .build()
        .unwrap_or_default()
}

/// Fetches `uri` as a BMC would for an update; the error is the message
/// its update task fails with.
pub(crate) async fn fetch(client: &reqwest::Client, uri: &str) -> Result<Fetched, String> {
    let response = client
        .get(uri)
        .send()
        .await
        .map_err(|e| format!("could not fetch the image {uri}: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!(
            "could not fetch the image {uri}: the server answered {status}"
        ));
    }
    let mut response = response;
    let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
    let mut bytes = 0u64;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("the transfer of the image {uri} broke: {e}"))?
    {
        bytes += chunk.len() as u64;
        if bytes > MAX_FILE_BYTES as u64 {
            return Err(format!(
                "the image {uri} is larger than {MAX_FILE_BYTES} bytes"
            ));
        }
        hash.update(&chunk);
    }
    let mut digest = String::from("sha256:");
    for b in hash.finish().as_ref() {
        digest.push_str(&format!("{b:02x}"));
    }
    Ok(Fetched { digest, bytes })
}
