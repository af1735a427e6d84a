//! Fetching an image from its origin into the store: streamed to a
//! temporary file while it is hashed, kept only if its digest and size are
//! the published ones.

use std::path::Path;

use flow_executor::images::ImageError;
use flow_protocol::firmware::MAX_IMAGE_BYTES;
use flow_protocol::jobs::FirmwareImage;
use flow_telemetry::ErrorChain;
use tokio::io::AsyncWriteExt;

/// What came from the origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// `sha256:<hex>` of the bytes received.
    pub digest: String,
    /// How many bytes were received.
    pub size: u64,
}

/// `sha256:<hex>` of a finished hash.
pub fn spelled(digest: ring::digest::Digest) -> String {
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for b in digest.as_ref() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Streams `image` from its origin into `tmp`, hashing as it goes; stops
/// once more bytes than its size (or the largest image accepted) came.
///
/// # Errors
///
/// [`ImageError::Unavailable`] when the origin cannot be reached, answers
/// 5xx or the transfer breaks; [`ImageError::Refused`] for a 4xx or a file
/// that cannot be written.
pub async fn to_file(
    client: &reqwest::Client,
    image: &FirmwareImage,
    tmp: &Path,
) -> Result<Fetched, ImageError> {
    let uri = image.image_uri.clone();
    let unavailable = |detail: String| ImageError::Unavailable {
        uri: uri.clone(),
        detail,
    };
    let refused = |detail: String| ImageError::Refused {
        uri: uri.clone(),
        detail,
    };
    let mut response = client
        .get(&image.image_uri)
        .send()
        .await
        .map_err(|e| unavailable(ErrorChain(&e).to_string()))?;
    let status = response.status();
    if status.is_client_error() {
        return Err(refused(format!("the origin answered {status}")));
    }
    if !status.is_success() {
        return Err(unavailable(format!("the origin answered {status}")));
    }
    let mut file = tokio::fs::File::create(tmp)
        .await
        .map_err(|e| refused(format!("cannot write {}: {e}", tmp.display())))?;
    let limit = image.size.unwrap_or(MAX_IMAGE_BYTES);
    let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
    let mut size: u64 = 0;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| unavailable(ErrorChain(&e).to_string()))?
    {
        size += chunk.len() as u64;
        hash.update(&chunk);
        if size > limit {
            // Longer than published: what came so far is enough to refuse.
            break;
        }
        file.write_all(&chunk)
            .await
            .map_err(|e| refused(format!("cannot write {}: {e}", tmp.display())))?;
    }
    file.sync_all()
        .await
        .map_err(|e| refused(format!("cannot write {}: {e}", tmp.display())))?;
    Ok(Fetched {
        digest: spelled(hash.finish()),
        size,
    })
}

/// The digest of an open stored file, read through once from where it is.
///
/// # Errors
///
/// The file cannot be read.
pub async fn digest_of(file: &mut tokio::fs::File) -> std::io::Result<Fetched> {
    use tokio::io::AsyncReadExt;
    let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hash.update(&buf[..n]);
    }
    Ok(Fetched {
        digest: spelled(hash.finish()),
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_spelled_the_oci_way() {
        let d = ring::digest::digest(&ring::digest::SHA256, b"test");
        assert_eq!(
            spelled(d),
            "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
    }
}
