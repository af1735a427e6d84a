//! `flow audit`: the audit log through `flow.api` (`audit.list`).

use flow_client::ClientError;
use flow_config::Settings;
use flow_protocol::api::endpoint;
use flow_protocol::audit::{AuditList, AuditOutcome, AuditRecord};
use flow_protocol::task::timestamp;
use time::OffsetDateTime;

use crate::Outcome;
use crate::args::AuditArgs;
use crate::out::outln;
use crate::remote::{Output, fail, table};
use crate::schedule::json;
use crate::task::bad;

/// A `--since`/`--until` value: an RFC 3339 time, or (`allow_ago`) a
/// duration back from `now` in Go syntax (`1h`, `90m`).
fn when(
    flag: &str,
    text: &str,
    now: OffsetDateTime,
    allow_ago: bool,
) -> Result<OffsetDateTime, ClientError> {
    if let Ok(t) = OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339) {
        return Ok(t);
    }
    if allow_ago && let Ok(d) = flow_rules::duration::parse_go(text) {
        let ago = time::Duration::try_from(d.magnitude)
            .map_err(|_| bad(format!("{flag}: {text:?} is too long ago")))?;
        return Ok(now - ago);
    }
    Err(bad(format!(
        "{flag}: {text:?} is not {}an RFC 3339 time (2026-12-05T20:00:00Z)",
        if allow_ago {
            "a duration (1h, 30m) or "
        } else {
            ""
        }
    )))
}

/// The `audit.list` request `flow audit` sends.
fn request(a: &AuditArgs, now: OffsetDateTime) -> Result<AuditList, ClientError> {
    let outcome = match &a.outcome {
        Some(o) => Some(
            AuditOutcome::parse(o)
                .ok_or_else(|| bad(format!("--outcome: {o:?} is not one of ok, refused, error")))?,
        ),
        None => None,
    };
    Ok(AuditList {
        since: a
            .since
            .as_deref()
            .map(|s| when("--since", s, now, true))
            .transpose()?,
        until: a
            .until
            .as_deref()
            .map(|s| when("--until", s, now, false))
            .transpose()?,
        actor: a.user.clone(),
        rack: a.rack.clone(),
        endpoint: a.endpoint.clone(),
        outcome,
        limit: Some(a.limit),
    })
}

/// What a record was about, in one cell.
fn subject(r: &AuditRecord) -> String {
    let mut parts: Vec<String> = r.racks.clone();
    parts.extend(r.task_ids.iter().map(|t| format!("task {t}")));
    parts.extend(r.target.clone());
    parts.join(", ")
}

/// `flow audit`.
pub async fn audit(settings: &Settings, out: Output, a: &AuditArgs) -> Outcome {
    if let Some(crate::args::AuditCommand::Verify) = a.command {
        return crate::archive::audit_verify(settings, out).await;
    }
    let result = async {
        let request = request(a, OffsetDateTime::now_utc())?;
        let client = crate::remote::connect(settings).await?;
        let list = client.call::<endpoint::AuditList>(&request).await?;
        if out.json {
            json(&list);
            return Ok(());
        }
        let mut t = table(&[
            "ID", "AT", "ACTOR", "ENDPOINT", "SUBJECT", "OUTCOME", "REASON", "MESSAGE",
        ]);
        for r in &list.records {
            t.add_row(vec![
                r.id.to_string(),
                timestamp::format(r.at),
                r.who(),
                r.endpoint.clone(),
                subject(r),
                r.outcome.as_str().to_owned(),
                r.reason.clone().unwrap_or_default(),
                r.message.clone(),
            ]);
        }
        outln!("{t}");
        Ok::<_, ClientError>(())
    }
    .await;
    match result {
        Ok(()) => Outcome::Valid,
        Err(e) => fail(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn since_takes_a_duration_back_or_a_time() {
        let now = datetime!(2026-12-05 20:00 UTC);
        assert_eq!(
            when("--since", "1h", now, true).unwrap(),
            datetime!(2026-12-05 19:00 UTC)
        );
        assert_eq!(
            when("--since", "2026-12-01T00:00:00Z", now, true).unwrap(),
            datetime!(2026-12-01 00:00 UTC)
        );
        let e = when("--since", "yesterday", now, true).unwrap_err();
        assert!(e.to_string().contains("--since"), "{e}");
        assert!(when("--until", "1h", now, false).is_err());
    }
}
