//! Serving stored images to BMCs: `GET /images/sha256/<hex>[/<name>]`.
//! Each file is hashed again before it is served; one that no longer
//! matches its name is removed (the next update fetches it again from its
//! origin) and answered 500, never served.

use std::path::PathBuf;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::io::AsyncSeekExt;

use super::fetch::digest_of;
use super::store::path_of;

/// Serves the store in `dir` on `listener` until aborted.
pub async fn run(listener: tokio::net::TcpListener, dir: PathBuf) {
    let app = Router::new()
        .route("/images/sha256/{hex}", get(image))
        .route("/images/sha256/{hex}/{*name}", get(named_image))
        .with_state(dir);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "the image server stopped");
    }
}

async fn named_image(
    State(dir): State<PathBuf>,
    Path((hex, _name)): Path<(String, String)>,
) -> Response {
    serve(dir, hex).await
}

async fn image(State(dir): State<PathBuf>, Path(hex): Path<String>) -> Response {
    serve(dir, hex).await
}

async fn serve(dir: PathBuf, hex: String) -> Response {
    let well_formed = hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !well_formed {
        return (StatusCode::NOT_FOUND, "no such image\n").into_response();
    }
    let path = path_of(&dir, &hex);
    // One open file is hashed, then served from its start: what is served
    // is what was checked.
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return (StatusCode::NOT_FOUND, "no such image\n").into_response();
        }
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "cannot open a stored image");
            return (StatusCode::INTERNAL_SERVER_ERROR, "cannot read the image\n").into_response();
        }
    };
    let held = match digest_of(&mut file).await {
        Ok(held) => held,
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "cannot read a stored image");
            return (StatusCode::INTERNAL_SERVER_ERROR, "cannot read the image\n").into_response();
        }
    };
    if held.digest != format!("sha256:{hex}") {
        tracing::error!(
            path = %path.display(),
            found = %held.digest,
            "a stored image no longer matches its digest: removed, not served"
        );
        let _ = tokio::fs::remove_file(&path).await;
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the stored image does not match its digest: removed, not served\n",
        )
            .into_response();
    }
    if let Err(e) = file.seek(std::io::SeekFrom::Start(0)).await {
        tracing::error!(path = %path.display(), error = %e, "cannot read a stored image");
        return (StatusCode::INTERNAL_SERVER_ERROR, "cannot read the image\n").into_response();
    }
    tracing::info!(digest = %held.digest, bytes = held.size, "image served");
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, held.size.to_string()),
        ],
        Body::from_stream(tokio_util::io::ReaderStream::new(file)),
    )
        .into_response()
}
