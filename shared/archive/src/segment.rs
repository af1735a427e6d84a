//! Writing and reading segments in an archive directory.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use ring::digest::{Context, SHA256};
use serde_json::Value;
use time::OffsetDateTime;
use time::macros::format_description;

use crate::chain;
use crate::error::ArchiveError;
use crate::manifest::{ChainEnds, FORMAT, Kind, Manifest};

/// An archive directory.
#[derive(Debug, Clone)]
pub struct Archive {
    dir: PathBuf,
}

/// What a new segment holds beside its records.
#[derive(Debug, Clone, Default)]
pub struct Span {
    /// The earliest record's own time.
    pub first_at: Option<OffsetDateTime>,
    /// The latest.
    pub last_at: Option<OffsetDateTime>,
    /// For the audit log: the chain's ends.
    pub chain: Option<ChainEnds>,
}

impl Archive {
    /// The archive in `dir` (created if missing).
    pub fn open(dir: impl Into<PathBuf>) -> Result<Archive, ArchiveError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(ArchiveError::io(&dir))?;
        Ok(Archive { dir })
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `records` as a new segment of `kind` and returns its
    /// manifest. Written to temporary names, synced and renamed, the
    /// manifest last: when this returns the segment is on disk whole.
    pub fn write(
        &self,
        kind: Kind,
        records: &[Value],
        span: Span,
    ) -> Result<Manifest, ArchiveError> {
        let now = OffsetDateTime::now_utc();
        let stamp = now
            .format(format_description!(
                "[year][month][day]T[hour][minute][second]Z"
            ))
            .unwrap_or_default();
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let segment = format!("{kind}-{stamp}-{}", &suffix[..8]);
        let kind_dir = self.dir.join(kind.as_str());
        fs::create_dir_all(&kind_dir).map_err(ArchiveError::io(&kind_dir))?;

        let data = kind_dir.join(format!("{segment}.jsonl.gz"));
        let tmp = kind_dir.join(format!(".{segment}.jsonl.gz.tmp"));
        let file = File::create(&tmp).map_err(ArchiveError::io(&tmp))?;
        let mut out = GzEncoder::new(
            HashingWriter::new(BufWriter::new(file)),
            Compression::default(),
        );
        for record in records {
            let line = serde_json::to_string(record).map_err(|e| ArchiveError::Corrupt {
                segment: segment.clone(),
                reason: format!("a record does not encode: {e}"),
            })?;
            out.write_all(line.as_bytes())
                .and_then(|()| out.write_all(b"\n"))
                .map_err(ArchiveError::io(&tmp))?;
        }
        let hashing = out.finish().map_err(ArchiveError::io(&tmp))?;
        let (bytes, sha256, buffered) = hashing.finish();
        let file = buffered.into_inner().map_err(|e| ArchiveError::Io {
            path: tmp.clone(),
            source: e.into_error(),
        })?;
        file.sync_all().map_err(ArchiveError::io(&tmp))?;
        fs::rename(&tmp, &data).map_err(ArchiveError::io(&data))?;

        let manifest = Manifest {
            format: FORMAT,
            segment: segment.clone(),
            kind,
            created_at: rfc3339(now),
            records: records.len() as u64,
            first_at: span.first_at.map(rfc3339),
            last_at: span.last_at.map(rfc3339),
            bytes,
            sha256,
            chain: span.chain,
        };
        let path = kind_dir.join(format!("{segment}.manifest.json"));
        let tmp = kind_dir.join(format!(".{segment}.manifest.json.tmp"));
        let text = serde_json::to_vec_pretty(&manifest).map_err(|e| ArchiveError::Manifest {
            path: path.clone(),
            source: e,
        })?;
        let mut file = File::create(&tmp).map_err(ArchiveError::io(&tmp))?;
        file.write_all(&text)
            .and_then(|()| file.sync_all())
            .map_err(ArchiveError::io(&tmp))?;
        fs::rename(&tmp, &path).map_err(ArchiveError::io(&path))?;
        if let Ok(dir) = File::open(&kind_dir) {
            // The renames are durable once the directory is synced.
            dir.sync_all().map_err(ArchiveError::io(&kind_dir))?;
        }
        tracing::info!(segment = %segment, kind = %kind, records = manifest.records, bytes, "archive segment written");
        Ok(manifest)
    }

    /// Every segment's manifest, by kind then time of writing.
    pub fn list(&self) -> Result<Vec<Manifest>, ArchiveError> {
        let mut out = Vec::new();
        for kind in Kind::ALL {
            let kind_dir = self.dir.join(kind.as_str());
            let entries = match fs::read_dir(&kind_dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(ArchiveError::io(&kind_dir)(e)),
            };
            for entry in entries {
                let entry = entry.map_err(ArchiveError::io(&kind_dir))?;
                let name = entry.file_name();
                let Some(segment) = name.to_str().and_then(|n| n.strip_suffix(".manifest.json"))
                else {
                    continue;
                };
                if segment.starts_with('.') {
                    continue;
                }
                out.push(read_manifest(&entry.path())?);
            }
        }
        out.sort_by(|a, b| {
            (a.kind, &a.created_at, &a.segment).cmp(&(b.kind, &b.created_at, &b.segment))
        });
        Ok(out)
    }

    /// The manifest of `segment`.
    pub fn manifest(&self, segment: &str) -> Result<Manifest, ArchiveError> {
        let path = self.manifest_path(segment)?;
        if !path.exists() {
            return Err(ArchiveError::NotFound(segment.to_owned()));
        }
        read_manifest(&path)
    }

    /// The records of `segment`, in order.
    pub fn records(&self, segment: &str) -> Result<Vec<Value>, ArchiveError> {
        let path = self.data_path(segment)?;
        let file = File::open(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ArchiveError::NotFound(segment.to_owned()),
            _ => ArchiveError::io(&path)(e),
        })?;
        let mut records = Vec::new();
        for (n, line) in BufReader::new(GzDecoder::new(file)).lines().enumerate() {
            let line = line.map_err(|e| ArchiveError::Corrupt {
                segment: segment.to_owned(),
                reason: format!("line {}: {e}", n + 1),
            })?;
            records.push(
                serde_json::from_str(&line).map_err(|e| ArchiveError::Corrupt {
                    segment: segment.to_owned(),
                    reason: format!("line {}: {e}", n + 1),
                })?,
            );
        }
        Ok(records)
    }

    /// The size and `sha256:` digest of `segment`'s data file as it is now.
    pub fn digest(&self, segment: &str) -> Result<(u64, String), ArchiveError> {
        let path = self.data_path(segment)?;
        let mut file = File::open(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ArchiveError::NotFound(segment.to_owned()),
            _ => ArchiveError::io(&path)(e),
        })?;
        let mut context = Context::new(&SHA256);
        let mut buf = vec![0u8; 64 * 1024];
        let mut bytes = 0u64;
        loop {
            let n = file.read(&mut buf).map_err(ArchiveError::io(&path))?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
            context.update(&buf[..n]);
        }
        Ok((bytes, chain::spell(context.finish().as_ref())))
    }

    /// The data file of `segment` (for a test that damages it, or an
    /// operator who copies it).
    pub fn data_path(&self, segment: &str) -> Result<PathBuf, ArchiveError> {
        let kind = kind_of(segment)?;
        Ok(self
            .dir
            .join(kind.as_str())
            .join(format!("{segment}.jsonl.gz")))
    }

    fn manifest_path(&self, segment: &str) -> Result<PathBuf, ArchiveError> {
        let kind = kind_of(segment)?;
        Ok(self
            .dir
            .join(kind.as_str())
            .join(format!("{segment}.manifest.json")))
    }
}

/// The kind a segment's name says, after checking the name is one this
/// archive writes (so a name from a request never leaves the directory).
pub fn kind_of(segment: &str) -> Result<Kind, ArchiveError> {
    let bad = || ArchiveError::BadName(segment.to_owned());
    let (kind, rest) = segment.split_once('-').ok_or_else(bad)?;
    let kind = Kind::parse(kind).ok_or_else(bad)?;
    let (stamp, suffix) = rest.split_once('-').ok_or_else(bad)?;
    let stamp_ok = stamp.len() == 16
        && stamp.as_bytes()[8] == b'T'
        && stamp.ends_with('Z')
        && stamp[..8].bytes().all(|b| b.is_ascii_digit())
        && stamp[9..15].bytes().all(|b| b.is_ascii_digit());
    let suffix_ok = suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_hexdigit());
    if stamp_ok && suffix_ok {
        Ok(kind)
    } else {
        Err(bad())
    }
}

fn read_manifest(path: &Path) -> Result<Manifest, ArchiveError> {
    let text = fs::read(path).map_err(ArchiveError::io(path))?;
    serde_json::from_slice(&text).map_err(|source| ArchiveError::Manifest {
        path: path.to_owned(),
        source,
    })
}

/// RFC 3339 in UTC with microseconds, as Flow's records spell times.
pub fn rfc3339(at: OffsetDateTime) -> String {
    at.to_offset(time::UtcOffset::UTC)
        .format(format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
        ))
        .unwrap_or_default()
}

/// Counts and hashes what goes through it.
struct HashingWriter<W> {
    inner: W,
    context: Context,
    bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            context: Context::new(&SHA256),
            bytes: 0,
        }
    }

    fn finish(self) -> (u64, String, W) {
        (
            self.bytes,
            chain::spell(self.context.finish().as_ref()),
            self.inner,
        )
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.context.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn temp_archive() -> Archive {
        let dir = std::env::temp_dir().join(format!("flow-archive-test-{}", uuid::Uuid::new_v4()));
        Archive::open(dir).unwrap()
    }

    #[test]
    fn a_segment_reads_back_as_written_and_its_manifest_holds_its_digest() {
        let archive = temp_archive();
        let records = vec![
            json!({"task": {"id": "a"}, "steps": []}),
            json!({"task": {"id": "b"}, "steps": [1]}),
        ];
        let manifest = archive
            .write(Kind::Tasks, &records, Span::default())
            .unwrap();
        assert_eq!(manifest.records, 2);
        assert_eq!(kind_of(&manifest.segment).unwrap(), Kind::Tasks);
        assert_eq!(archive.records(&manifest.segment).unwrap(), records);
        assert_eq!(
            archive.digest(&manifest.segment).unwrap(),
            (manifest.bytes, manifest.sha256.clone())
        );
        assert_eq!(archive.list().unwrap(), vec![manifest.clone()]);
        assert_eq!(archive.manifest(&manifest.segment).unwrap(), manifest);
        fs::remove_dir_all(archive.dir()).unwrap();
    }

    #[test]
    fn names_that_are_not_segments_are_refused_before_any_path_is_built() {
        for name in [
            "../etc/passwd",
            "tasks-20261207T180000Z-../../x",
            "tasks",
            "nope-20261207T180000Z-1a2b3c4d",
            "tasks-2026120T1800000Z-1a2b3c4d",
        ] {
            assert!(
                matches!(kind_of(name), Err(ArchiveError::BadName(_))),
                "{name}"
            );
        }
        assert_eq!(
            kind_of("audit-20261207T180000Z-1a2b3c4d").unwrap(),
            Kind::Audit
        );
    }
}
