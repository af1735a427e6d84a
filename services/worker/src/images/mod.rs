//! The worker's firmware image store: BMCs are given only bytes verified
//! against an image's digest (`docs/firmware.md`, "Verified bytes only").
//!
//! * [`store`] keeps images by digest in a directory (`sha256/<hex>`),
//!   fetching each from its origin once — hashed as it streams, checked
//!   against the digest and size before it is kept ([`fetch`]).
//! * [`serve`] serves them to BMCs over HTTP at
//!   `/images/sha256/<hex>/<file name>`, hashing each again before it is
//!   served: a stored file that no longer matches is removed, not served.
//!
//! The executor asks through [`flow_executor::images::ImageSource`] before
//! it sends an update, so a mismatch fails the step's components with no
//! update request sent.

pub mod fetch;
pub mod serve;
pub mod store;

pub use store::{ImageStore, ImageStoreConfig, ImageStoreError};
