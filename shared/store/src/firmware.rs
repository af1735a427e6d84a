//! The firmware bundle catalog as kept
//! (`migrations/20261207400001_firmware_bundles.sql`): bundles published,
//! read, listed and retired. A bundle's images never change once published
//! (the tables refuse it); publishing the same name and version again is
//! the same bundle when its contents are the same, and refused naming the
//! image when they are not.

use flow_protocol::firmware::{
    BundleImage, BundleList, BundleListReply, BundlePublish, BundleRecord, BundleRef,
};
use flow_protocol::jobs::SubTarget;
use flow_rules::ComponentType;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::{Store, StoreError};

type BundleRow = (
    String,
    String,
    Vec<String>,
    String,
    OffsetDateTime,
    Option<OffsetDateTime>,
);

type ImageRow = (String, String, String, String, String, i64);

fn corrupt(what: &str, reason: String) -> StoreError {
    StoreError::Corrupt {
        what: what.to_owned(),
        reason,
    }
}

/// The images in their canonical order: by component type, then
/// sub-target (the main firmware first).
fn canonical(mut images: Vec<BundleImage>) -> Vec<BundleImage> {
    images.sort_by(|a, b| {
        (
            a.component_type.as_str(),
            a.sub_target.map(SubTarget::as_str),
        )
            .cmp(&(
                b.component_type.as_str(),
                b.sub_target.map(SubTarget::as_str),
            ))
    });
    images
}

/// What differs between the images published and those asked, as the
/// refusal names it: the first image whose version, URL, digest or size
/// differs, or that is in one and not the other.
fn difference(kept: &[BundleImage], asked: &[BundleImage]) -> Option<String> {
    for image in asked {
        match kept.iter().find(|k| k.slot() == image.slot()) {
            None => return Some(format!("{}: not in the published bundle", image.slot())),
            Some(k) if k != image => {
                let mut what = Vec::new();
                if k.version != image.version {
                    what.push(format!(
                        "version {} published, {} now",
                        k.version, image.version
                    ));
                }
                if k.digest != image.digest {
                    what.push(format!(
                        "digest {} published, {} now",
                        k.digest, image.digest
                    ));
                }
                if k.size != image.size {
                    what.push(format!("size {} published, {} now", k.size, image.size));
                }
                if k.url != image.url {
                    what.push(format!("url {} published, {} now", k.url, image.url));
                }
                return Some(format!("{}: {}", image.slot(), what.join(", ")));
            }
            Some(_) => {}
        }
    }
    kept.iter()
        .find(|k| !asked.iter().any(|a| a.slot() == k.slot()))
        .map(|k| format!("{}: published, missing now", k.slot()))
}

async fn images_of(
    conn: &mut PgConnection,
    name: &str,
    version: &str,
) -> Result<Vec<BundleImage>, StoreError> {
    let rows: Vec<ImageRow> = sqlx::query_as(
        "SELECT component_type, sub_target, image_version, url, digest, size \
         FROM firmware_images WHERE bundle = $1 AND bundle_version = $2",
    )
    .bind(name)
    .bind(version)
    .fetch_all(&mut *conn)
    .await?;
    let what = format!("firmware bundle {name} {version}");
    let images = rows
        .into_iter()
        .map(|(t, sub, image_version, url, digest, size)| {
            Ok(BundleImage {
                component_type: t
                    .parse::<ComponentType>()
                    .map_err(|e| corrupt(&what, e.to_string()))?,
                sub_target: if sub.is_empty() {
                    None
                } else {
                    Some(sub.parse::<SubTarget>().map_err(|e| corrupt(&what, e))?)
                },
                version: image_version,
                url,
                digest,
                size: u64::try_from(size).map_err(|e| corrupt(&what, e.to_string()))?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(canonical(images))
}

async fn record(conn: &mut PgConnection, row: BundleRow) -> Result<BundleRecord, StoreError> {
    let (name, version, models, published_by, published_at, retired_at) = row;
    let images = images_of(conn, &name, &version).await?;
    Ok(BundleRecord {
        name,
        version,
        models,
        images,
        published_by,
        published_at,
        retired_at,
    })
}

/// A bundle's columns, in [`BundleRow`]'s order.
macro_rules! columns {
    () => {
        "name, version, models, published_by, published_at, retired_at"
    };
}

impl Store {
    /// Publishes a bundle (checked by [`BundlePublish::check`] first), or
    /// answers the one already published under its name and version when
    /// its contents are the same; refused (`conflict`) naming the image
    /// when they are not.
    pub async fn publish_bundle(&self, bundle: &BundlePublish) -> Result<BundleRecord, StoreError> {
        let problems = bundle.problems();
        if !problems.is_empty() {
            return Err(StoreError::Invalid {
                message: format!("the bundle is invalid: {}", problems.join("; ")),
                details: problems,
            });
        }
        let images = canonical(bundle.images.clone());
        let mut models = bundle.models.clone();
        models.sort();
        models.dedup();
        let by = self
            .audit_scope()
            .map(|s| s.actor().name)
            .unwrap_or_else(|| "flow".to_owned());
        let mut tx = self.pool().begin().await?;
        // One publisher of a name and version at a time.
        sqlx::query(
            "SELECT pg_advisory_xact_lock(hashtext('firmware_bundle:' || $1 || ' ' || $2))",
        )
        .bind(&bundle.name)
        .bind(&bundle.version)
        .execute(&mut *tx)
        .await?;
        let existing: Option<BundleRow> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM firmware_bundles WHERE name = $1 AND version = $2"
        ))
        .bind(&bundle.name)
        .bind(&bundle.version)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = existing {
            let kept = record(&mut tx, row).await?;
            let differs = difference(&kept.images, &images).or_else(|| {
                (kept.models != models)
                    .then(|| format!("models {:?} published, {:?} now", kept.models, models))
            });
            tx.commit().await?;
            return match differs {
                None => Ok(kept),
                Some(what) => Err(StoreError::Conflict(format!(
                    "firmware bundle {} {} is already published with other contents ({what}): a published bundle never changes; publish the changed images as a new version",
                    bundle.name, bundle.version
                ))),
            };
        }
        let row: BundleRow = sqlx::query_as(concat!(
            "INSERT INTO firmware_bundles (name, version, models, published_by) \
             VALUES ($1, $2, $3, $4) RETURNING ",
            columns!()
        ))
        .bind(&bundle.name)
        .bind(&bundle.version)
        .bind(&models)
        .bind(&by)
        .fetch_one(&mut *tx)
        .await?;
        for image in &images {
            sqlx::query(
                "INSERT INTO firmware_images (bundle, bundle_version, component_type, sub_target, \
                   image_version, url, digest, size) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(&bundle.name)
            .bind(&bundle.version)
            .bind(image.component_type.as_str())
            .bind(image.sub_target.map_or("", SubTarget::as_str))
            .bind(&image.version)
            .bind(&image.url)
            .bind(&image.digest)
            .bind(i64::try_from(image.size).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await?;
        }
        let record = record(&mut tx, row).await?;
        self.commit(tx).await?;
        tracing::info!(bundle = %record.name, version = %record.version, images = record.images.len(), "firmware bundle published");
        Ok(record)
    }

    /// One bundle.
    pub async fn bundle(&self, which: &BundleRef) -> Result<BundleRecord, StoreError> {
        let mut conn = self.pool().acquire().await?;
        let row: Option<BundleRow> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM firmware_bundles WHERE name = $1 AND version = $2"
        ))
        .bind(&which.name)
        .bind(&which.version)
        .fetch_optional(&mut *conn)
        .await?;
        match row {
            Some(row) => record(&mut conn, row).await,
            None => Err(StoreError::NotFound(format!(
                "firmware bundle {} {} not found",
                which.name, which.version
            ))),
        }
    }

    /// The catalog: by name, newest published first; retired ones only
    /// when asked.
    pub async fn list_bundles(&self, filter: &BundleList) -> Result<BundleListReply, StoreError> {
        let mut conn = self.pool().acquire().await?;
        let rows: Vec<BundleRow> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM firmware_bundles WHERE ($1::text IS NULL OR name = $1) \
               AND ($2 OR retired_at IS NULL) ORDER BY name, published_at DESC, version DESC"
        ))
        .bind(filter.name.as_deref())
        .bind(filter.retired)
        .fetch_all(&mut *conn)
        .await?;
        let mut bundles = Vec::with_capacity(rows.len());
        for row in rows {
            bundles.push(record(&mut conn, row).await?);
        }
        Ok(BundleListReply { bundles })
    }

    /// Retires a bundle: kept, shown with `--retired`, and no new task may
    /// name it. Retiring it again changes nothing.
    pub async fn retire_bundle(&self, which: &BundleRef) -> Result<BundleRecord, StoreError> {
        let mut tx = self.pool().begin().await?;
        let row: Option<BundleRow> = sqlx::query_as(concat!(
            "UPDATE firmware_bundles SET retired_at = COALESCE(retired_at, now()) \
             WHERE name = $1 AND version = $2 RETURNING ",
            columns!()
        ))
        .bind(&which.name)
        .bind(&which.version)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(StoreError::NotFound(format!(
                "firmware bundle {} {} not found",
                which.name, which.version
            )));
        };
        let record = record(&mut tx, row).await?;
        self.commit(tx).await?;
        Ok(record)
    }
}
