//! `flow firmware restore --snapshot <task> --rack <its rack>`: the task that brings a
//! firmware task's components back to the versions it recorded before it
//! ran (`docs/firmware.md`, "Snapshot and restore"). The snapshot comes
//! from `task.get`, the images from the catalog (`firmware_bundle.list`,
//! retired bundles too); the plan is `flow_decisions::restore`'s. Each
//! component it cannot bring back is named on stderr before anything is
//! submitted, and left alone. The task is a `downgrade` of the components
//! it restores, going through the same version checks, allowance and
//! reason as any.

use flow_client::ClientError;
use flow_config::Settings;
use flow_protocol::api::{TaskById, TaskSubmit, endpoint};
use flow_protocol::firmware::BundleList;
use flow_protocol::ids::RackRef;
use flow_protocol::rack_api::RackByRef;
use flow_rules::{FirmwareOperation, OperationCode};

use crate::args::FirmwareArgs;
use crate::task::{bad, task_id};

/// The restore's submission, after printing what it leaves alone.
///
/// # Errors
///
/// No `--snapshot`, a task without a snapshot, nothing to restore, or an
/// API error.
pub(crate) async fn request(
    settings: &Settings,
    args: &FirmwareArgs,
) -> Result<TaskSubmit, ClientError> {
    let Some(snapshot) = args.snapshot.as_deref() else {
        return Err(bad(
            "restore needs --snapshot <task>: the firmware task whose versions to bring back"
                .to_owned(),
        ));
    };
    let t = &args.target;
    if !t.labels.is_empty() || !t.components.is_empty() || t.racks.len() != 1 {
        return Err(bad(
            "restore takes its components from --snapshot: name the snapshot's rack with one --rack (no --label or --component)".to_owned(),
        ));
    }
    let client = crate::remote::connect(settings).await?;
    let task = client
        .call::<endpoint::TaskGet>(&TaskById {
            id: task_id(snapshot)?,
        })
        .await?;
    let named = &t.racks[0];
    if *named != task.rack && *named != task.rack_id.to_string() {
        return Err(bad(format!(
            "task {snapshot} ran on {}, not {named}: --rack names the rack the restore changes",
            task.rack
        )));
    }
    if task.firmware_snapshot.is_empty() {
        return Err(bad(format!(
            "task {snapshot} kept no firmware snapshot (only firmware tasks keep one, since this release)"
        )));
    }
    let rack = client
        .call::<endpoint::RackGet>(&RackByRef {
            rack: RackRef(task.rack.clone()),
        })
        .await?;
    let bundles = client
        .call::<endpoint::FirmwareBundleList>(&BundleList {
            name: None,
            retired: true,
        })
        .await?
        .bundles;
    let plan =
        flow_decisions::restore::plan_restore(&task.firmware_snapshot, &bundles, &rack.model);
    for left in &plan.left {
        eprintln!(
            "left alone: {}/{} (had {}): {}",
            task.rack,
            left.component,
            if left.version.is_empty() {
                "an unknown version"
            } else {
                &left.version
            },
            left.reason
        );
    }
    for r in &plan.restored {
        eprintln!(
            "restore: {}/{} to {} (bundle {})",
            task.rack, r.component, r.version, r.bundle
        );
    }
    if plan.restored.is_empty() {
        return Err(bad(format!(
            "nothing of task {snapshot}'s snapshot can be restored (each component is named above)"
        )));
    }
    let mut body = TaskSubmit::new(
        t.request_id
            .clone()
            .unwrap_or_else(|| format!("cli-{}", flow_protocol::TaskId::new())),
        OperationCode::Firmware(FirmwareOperation::Downgrade),
        Vec::new(),
    );
    body.components = plan
        .restored
        .iter()
        .map(|r| format!("{}/{}", task.rack, r.component))
        .collect();
    body.firmware = plan.images;
    body.description = t
        .description
        .clone()
        .unwrap_or_else(|| format!("restore of task {snapshot}'s snapshot"));
    body.allow_version_change = args.allow_version_change;
    body.reason = t.reason.clone();
    body.override_readiness = t.override_readiness;
    Ok(body)
}
