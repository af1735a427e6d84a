//! Where a firmware step's image comes from: BMCs are given only bytes
//! verified against the image's digest. The worker implements
//! [`ImageSource`] with its content-addressed store
//! (`services/worker/src/images/`): it fetches an image from its origin
//! once, hashing it as it streams, and serves BMCs from the store; the
//! executor asks for the URL to give a BMC before it decides to send an
//! update, so a digest that does not match fails every component of the
//! step with **no** update request sent.

use futures::future::BoxFuture;

use flow_hardware::ErrorClass;
use flow_protocol::jobs::FirmwareImage;

/// Why an image cannot be given to a BMC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The image has no digest (a job written before digests existed).
    #[error("the image {uri} has no digest: Flow gives BMCs only bytes it has verified")]
    NoDigest {
        /// The image's origin.
        uri: String,
    },
    /// What the origin served is not what was published.
    #[error(
        "the image {uri} does not match its digest: expected {expected}{expected_size}, the origin served {got} ({got_size} bytes); no BMC was given it"
    )]
    Mismatch {
        /// The image's origin.
        uri: String,
        /// The digest it must have.
        expected: String,
        /// `, 1048576 bytes` when the size is known, else empty.
        expected_size: String,
        /// The digest of what came (of its first bytes past the size, if
        /// it was longer).
        got: String,
        /// How many bytes came.
        got_size: u64,
    },
    /// The origin refused (4xx) or the store cannot keep it: retrying will
    /// not help.
    #[error("the image {uri} cannot be fetched: {detail}")]
    Refused {
        /// The image's origin.
        uri: String,
        /// Why.
        detail: String,
    },
    /// The origin did not answer or failed (5xx): retried by the step's
    /// policy.
    #[error("the image {uri} could not be fetched: {detail}")]
    Unavailable {
        /// The image's origin.
        uri: String,
        /// Why.
        detail: String,
    },
}

impl ImageError {
    /// Transient when the origin may answer later; permanent otherwise.
    pub fn class(&self) -> ErrorClass {
        match self {
            ImageError::Unavailable { .. } => ErrorClass::Transient,
            _ => ErrorClass::Permanent,
        }
    }
}

/// Makes a verified copy of an image available to BMCs.
pub trait ImageSource: Send + Sync {
    /// The URL to give a BMC for `image`: fetched from its origin and
    /// verified against its digest (and size) first if this source does
    /// not hold it yet. Calling it again for an image held is cheap.
    fn stage<'a>(&'a self, image: &'a FirmwareImage) -> BoxFuture<'a, Result<String, ImageError>>;
}

/// A source that gives BMCs the origin's URL as it is, unverified: for
/// executor tests whose fake managers fetch nothing. A worker never uses
/// it.
#[derive(Debug, Default, Clone, Copy)]
pub struct OriginUnverified;

impl ImageSource for OriginUnverified {
    fn stage<'a>(&'a self, image: &'a FirmwareImage) -> BoxFuture<'a, Result<String, ImageError>> {
        Box::pin(async move { Ok(image.image_uri.clone()) })
    }
}
