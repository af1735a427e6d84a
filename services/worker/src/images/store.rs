//! The content-addressed store: images by digest in a directory, fetched
//! from their origin once and verified before they are kept.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use flow_executor::images::{ImageError, ImageSource};
use flow_protocol::firmware::is_sha256;
use flow_protocol::jobs::FirmwareImage;

use super::fetch;

/// Where the store keeps its files and where BMCs reach it.
#[derive(Debug, Clone)]
pub struct ImageStoreConfig {
    /// The directory (created if missing). Workers on one host may share
    /// it: each image is then fetched once per host.
    pub dir: PathBuf,
    /// Where to serve BMCs (port 0: any free port).
    pub listen: SocketAddr,
    /// The base URL BMCs are given (`http://worker-3.bmc.example:9460`);
    /// without one, `http://` and the address listened on.
    pub url: Option<String>,
}

/// Why the store cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ImageStoreError {
    /// The directory cannot be made.
    #[error("--image-store {}: cannot create it", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The address cannot be listened on.
    #[error("--image-listen {addr}: cannot listen")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP client cannot be built.
    #[error("cannot build the HTTP client that fetches images")]
    Client(#[source] reqwest::Error),
}

/// Images by digest, served to BMCs. Dropping it stops its server.
#[derive(Debug)]
pub struct ImageStore {
    dir: PathBuf,
    base_url: String,
    client: reqwest::Client,
    /// One fetch per digest at a time: components of a step asking for the
    /// same image wait for the first fetch.
    fetching: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    _server: tokio_util::task::AbortOnDropHandle<()>,
}

/// The path of the file holding the image of `hex`.
pub(crate) fn path_of(dir: &Path, hex: &str) -> PathBuf {
    dir.join("sha256").join(hex)
}

impl ImageStore {
    /// Makes the directory and starts serving BMCs.
    ///
    /// # Errors
    ///
    /// The directory cannot be made, the address cannot be listened on.
    pub async fn start(config: ImageStoreConfig) -> Result<Arc<ImageStore>, ImageStoreError> {
        for sub in ["sha256", "tmp"] {
            let path = config.dir.join(sub);
            tokio::fs::create_dir_all(&path)
                .await
                .map_err(|source| ImageStoreError::Dir {
                    dir: path.clone(),
                    source,
                })?;
        }
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| ImageStoreError::Listen {
                addr: config.listen,
                source,
            })?;
        let bound = listener
            .local_addr()
            .map_err(|source| ImageStoreError::Listen {
                addr: config.listen,
                source,
            })?;
        let base_url = config
            .url
            .map(|u| u.trim_end_matches('/').to_owned())
            .unwrap_or_else(|| format!("http://{bound}"));
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .read_timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(ImageStoreError::Client)?;
        let server = tokio::spawn(super::serve::run(listener, config.dir.clone()));
        tracing::info!(dir = %config.dir.display(), url = %base_url, "image store serving BMCs");
        Ok(Arc::new(ImageStore {
            dir: config.dir,
            base_url,
            client,
            fetching: Mutex::default(),
            _server: tokio_util::task::AbortOnDropHandle::new(server),
        }))
    }

    /// The base URL BMCs are given.
    pub fn url(&self) -> &str {
        &self.base_url
    }

    /// The URL a BMC is given for the image of `hex` fetched from `origin`:
    /// the origin's file name stays at the end (a BMC, or an operator
    /// reading its log, sees the name it was published under).
    fn served_url(&self, hex: &str, origin: &str) -> String {
        let no_query = origin.split(['?', '#']).next().unwrap_or(origin);
        let name = no_query
            .rsplit('/')
            .next()
            .filter(|n| !n.is_empty())
            .unwrap_or("image");
        let name: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+' | '%'))
            .collect();
        format!("{}/images/sha256/{hex}/{name}", self.base_url)
    }

    fn lock_for(&self, hex: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.fetching.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, l| Arc::strong_count(l) > 1);
        Arc::clone(map.entry(hex.to_owned()).or_default())
    }

    /// Holds `image` verified, fetching it if missing; its URL for BMCs.
    async fn ensure(&self, image: &FirmwareImage) -> Result<String, ImageError> {
        let uri = &image.image_uri;
        let digest = image
            .digest
            .as_deref()
            .ok_or(ImageError::NoDigest { uri: uri.clone() })?;
        if !is_sha256(digest) {
            return Err(ImageError::Refused {
                uri: uri.clone(),
                detail: format!("{digest:?} is not sha256:<64 lower-case hex digits>"),
            });
        }
        let hex = &digest["sha256:".len()..];
        let path = path_of(&self.dir, hex);
        let url = self.served_url(hex, uri);
        if tokio::fs::try_exists(&path).await.unwrap_or(false) {
            return Ok(url);
        }
        let lock = self.lock_for(hex);
        let _one = lock.lock().await;
        if tokio::fs::try_exists(&path).await.unwrap_or(false) {
            return Ok(url);
        }
        let tmp = self
            .dir
            .join("tmp")
            .join(format!("{hex}.{}", uuid::Uuid::new_v4().simple()));
        let started = std::time::Instant::now();
        let fetched = fetch::to_file(&self.client, image, &tmp).await;
        let fetched = match fetched {
            Ok(f) => f,
            Err(e) => {
                let _ = tokio::fs::remove_file(&tmp).await;
                return Err(e);
            }
        };
        let size_ok = image.size.is_none_or(|s| s == fetched.size);
        if fetched.digest != digest || !size_ok {
            let _ = tokio::fs::remove_file(&tmp).await;
            tracing::error!(
                image = %uri,
                expected = %digest,
                got = %fetched.digest,
                bytes = fetched.size,
                "the origin served bytes that do not match the image's digest: not kept, no BMC is given them"
            );
            return Err(ImageError::Mismatch {
                uri: uri.clone(),
                expected: digest.to_owned(),
                expected_size: image
                    .size
                    .map(|s| format!(", {s} bytes"))
                    .unwrap_or_default(),
                got: fetched.digest,
                got_size: fetched.size,
            });
        }
        tokio::fs::rename(&tmp, &path)
            .await
            .map_err(|e| ImageError::Refused {
                uri: uri.clone(),
                detail: format!("cannot keep it at {}: {e}", path.display()),
            })?;
        tracing::info!(
            image = %uri,
            digest = %digest,
            bytes = fetched.size,
            ms = started.elapsed().as_millis() as u64,
            "image fetched from its origin and verified"
        );
        Ok(url)
    }
}

impl ImageSource for ImageStore {
    fn stage<'a>(&'a self, image: &'a FirmwareImage) -> BoxFuture<'a, Result<String, ImageError>> {
        Box::pin(self.ensure(image))
    }
}

/// The source of a worker started without a store: every update refused,
/// naming the setting.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoStore;

impl ImageSource for NoStore {
    fn stage<'a>(&'a self, image: &'a FirmwareImage) -> BoxFuture<'a, Result<String, ImageError>> {
        Box::pin(async move {
            Err(ImageError::Refused {
                uri: image.image_uri.clone(),
                detail:
                    "this worker has no image store to serve BMCs from (flow-worker --image-store)"
                        .to_owned(),
            })
        })
    }
}
