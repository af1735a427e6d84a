//! The archive's errors.

use std::path::PathBuf;

/// What went wrong reading or writing an archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A file of the archive could not be read or written.
    #[error("archive {path}: {source}", path = path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A manifest is not what this release writes.
    #[error("archive manifest {path}: {source}", path = path.display())]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// Why it does not decode.
        #[source]
        source: serde_json::Error,
    },
    /// A segment's contents do not decode.
    #[error("archive segment {segment}: {reason}")]
    Corrupt {
        /// The segment.
        segment: String,
        /// What is wrong.
        reason: String,
    },
    /// No segment has this name.
    #[error("no archive segment {0:?}")]
    NotFound(String),
    /// Not a segment's name (`tasks-20261207T180000Z-1a2b3c4d`).
    #[error("segment: {0:?} is not an archive segment name (<kind>-<yyyymmddThhmmssZ>-<8 hex>)")]
    BadName(String),
}

impl ArchiveError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ArchiveError {
        let path = path.into();
        move |source| ArchiveError::Io { path, source }
    }
}
