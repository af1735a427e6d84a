//! `TaskService`, its `Tasks` and the Task resource of an update.

use serde_json::{Value, json};

use super::View;
use super::root::{collection, link, status};
use super::route::ROOT;
use super::update::{member_uri, simple_update_target};
use crate::model::{TaskState, UpdateTask};

/// The URI of task `id`.
pub(crate) fn task_uri(id: u32) -> String {
    format!("{ROOT}/TaskService/Tasks/{id}")
}

/// `GET /redfish/v1/TaskService`.
pub(crate) fn task_service() -> Value {
    json!({
        "@odata.id": format!("{ROOT}/TaskService"),
        "@odata.type": "#TaskService.v1_2_0.TaskService",
        "Id": "TaskService",
        "Name": "Task Service",
        "ServiceEnabled": true,
        "CompletedTaskOverWritePolicy": "Oldest",
        "LifeCycleEventOnTaskStateChange": false,
        "Status": status(true),
        "Tasks": link(format!("{ROOT}/TaskService/Tasks")),
    })
}

/// `GET /redfish/v1/TaskService/Tasks`.
pub(crate) fn tasks(view: &View<'_>) -> Value {
    collection(
        &format!("{ROOT}/TaskService/Tasks"),
        "TaskCollection",
        "Task Collection",
        view.component.tasks.iter().map(|t| task_uri(t.id)),
    )
}

/// `GET /redfish/v1/TaskService/Tasks/<id>`, if that task is kept.
pub(crate) fn task(view: &View<'_>, id: u32) -> Option<Value> {
    view.component.task(id).map(|t| task_body(view, t))
}

fn message(id: &str, text: String, args: Vec<String>, severity: &str, resolution: &str) -> Value {
    json!({
        "@odata.type": "#Message.v1_1_1.Message",
        "MessageId": id,
        "Message": text,
        "MessageArgs": args,
        "Severity": severity,
        "MessageSeverity": severity,
        "Resolution": resolution,
    })
}

/// The Task resource of `task` as of the view's instant.
pub(crate) fn task_body(view: &View<'_>, task: &UpdateTask) -> Value {
    let state = task.view(view.now);
    let targets: Vec<String> = task.targets.iter().map(|m| member_uri(m)).collect();
    let messages: Vec<Value> = match state.state {
        TaskState::New | TaskState::Running => vec![message(
            "Update.1.0.UpdateInProgress",
            "An update is in progress.".to_owned(),
            vec![],
            "OK",
            "None.",
        )],
        TaskState::Completed => targets
            .iter()
            .map(|target| {
                message(
                    "Update.1.0.UpdateSuccessful",
                    format!("The target '{target}' has been updated successfully."),
                    vec![target.clone()],
                    "OK",
                    "None.",
                )
            })
            .collect(),
        TaskState::Exception => targets
            .iter()
            .map(|target| {
                let reason = state.failure.unwrap_or("unknown failure");
                message(
                    "Update.1.0.ApplyFailed",
                    format!(
                        "The installation of image '{}' to '{target}' failed: {reason}.",
                        task.image_uri
                    ),
                    vec![task.image_uri.clone(), target.clone()],
                    "Critical",
                    "Verify that the component is present, accessible, and in a state that can accept an update, then retry the update.",
                )
            })
            .collect(),
    };
    let request = json!({ "ImageURI": task.image_uri, "Targets": targets });
    let mut body = json!({
        "@odata.id": task_uri(task.id),
        "@odata.type": "#Task.v1_7_0.Task",
        "Id": task.id.to_string(),
        "Name": format!("Task {}", task.id),
        "TaskState": state.state,
        "TaskStatus": if state.state == TaskState::Exception { "Critical" } else { "OK" },
        "PercentComplete": state.percent,
        "StartTime": view.clock.rfc3339(task.start),
        "Messages": messages,
        "Payload": {
            "HttpOperation": "POST",
            "TargetUri": simple_update_target(),
            "JsonBody": request.to_string(),
            "HttpHeaders": [],
        },
    });
    if let (Some(ended), Some(fields)) = (state.ended_at, body.as_object_mut()) {
        fields.insert("EndTime".to_owned(), view.clock.rfc3339(ended).into());
    }
    body
}
