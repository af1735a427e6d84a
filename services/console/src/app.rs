//! The HTTP side: routes, the access check every request passes, and the
//! handlers, each reading `flow.api` and rendering a page (or, asked with
//! `X-Flow-Fragment: 1`, the page's content alone).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Extension, Form, Router};
use flow_client::{Client, ClientError};
use flow_protocol::api::{
    ErrorCode, RackByRef, RackList, TaskById, TaskList, TaskSubmit, endpoint,
};
use flow_protocol::event::{EventById, EventClear, EventList};
use flow_protocol::ids::{EventId, RackRef, TaskId};
use flow_protocol::run::{RunAdvance, RunByRef, RunList, RunTargets};
use flow_protocol::schedule::{ScheduleByRef, ScheduleList};
use futures::StreamExt;
use maud::Markup;
use serde::Deserialize;

use crate::access::{Access, Denied, User};
use crate::actions;
use crate::live::{self, Topic};
use crate::pages::confirm::Confirmation;
use crate::pages::{self, Ctx, Section};

/// How many racks are read at once for the site page.
const RACK_READS: usize = 16;

/// How many recent tasks the site page looks through for open ones.
const OPEN_TASKS_LOOKED_AT: u32 = 1000;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// `flow.api`.
    pub client: Arc<Client>,
    /// The connection the live streams subscribe on.
    pub nats: async_nats::Client,
    /// Users and the CSRF key.
    pub access: Arc<Access>,
    /// Component states, as the watchers last saw them.
    pub states: Arc<crate::states::States>,
}

/// Why a page cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// `flow.api` refused or did not answer.
    #[error(transparent)]
    Api(#[from] ClientError),
    /// The request itself is wrong (a field named).
    #[error("{0}")]
    BadRequest(String),
    /// The live stream could not subscribe.
    #[error("cannot follow the event stream: {0}")]
    Subscribe(#[source] async_nats::SubscribeError),
    /// Not allowed.
    #[error("{}", denied_text(*.0))]
    Denied(Denied),
}

fn denied_text(d: Denied) -> &'static str {
    match d {
        Denied::Unauthenticated => "credentials required (a bearer token or basic credentials)",
        Denied::Forbidden => "this needs the operator role",
        Denied::CrossSite => {
            "refused: the form's token is missing or stale, or the request came from another \
             site; reload the page and try again"
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = match &self {
            PageError::Api(ClientError::Api(e)) => match e.code {
                ErrorCode::NotFound => StatusCode::NOT_FOUND,
                ErrorCode::BadRequest | ErrorCode::Invalid => StatusCode::BAD_REQUEST,
                ErrorCode::Conflict => StatusCode::CONFLICT,
                // Flow refused the console's own NATS identity (verified
                // mode): the browser's credentials would not change that.
                ErrorCode::Unauthenticated | ErrorCode::Forbidden => StatusCode::FORBIDDEN,
                ErrorCode::Unavailable | ErrorCode::Internal => StatusCode::BAD_GATEWAY,
            },
            PageError::Api(_) | PageError::Subscribe(_) => StatusCode::BAD_GATEWAY,
            PageError::BadRequest(_) => StatusCode::BAD_REQUEST,
            PageError::Denied(Denied::Unauthenticated) => StatusCode::UNAUTHORIZED,
            PageError::Denied(_) => StatusCode::FORBIDDEN,
        };
        let message = self.to_string();
        tracing::warn!(status = status.as_u16(), error = %message, "page refused");
        let body = pages::problem(status.canonical_reason().unwrap_or("Error"), &message);
        let mut response = (status, body).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"Flow console\", charset=\"UTF-8\""),
            );
        }
        response
    }
}

type PageResult = Result<Response, PageError>;

/// The router: every route behind the access check but `/healthz`.
pub fn router(state: AppState) -> Router {
    let pages = Router::new()
        .route("/", get(site))
        .route("/tasks", get(tasks))
        .route("/tasks/{id}", get(task))
        .route("/tasks/{id}/cancel", get(cancel_confirm).post(cancel))
        .route("/racks/{rack}", get(rack))
        .route("/racks/{rack}/power", get(power_confirm).post(power))
        .route("/runs", get(runs))
        .route("/runs/{run}", get(run))
        .route("/runs/{run}/act", get(run_confirm).post(run_act))
        .route("/schedules", get(schedules))
        .route("/schedules/{schedule}", get(schedule))
        .route(
            "/schedules/{schedule}/act",
            get(schedule_confirm).post(schedule_act),
        )
        .route("/audit", get(audit))
        .route("/events", get(events))
        .route("/events/{id}", get(event))
        .route("/events/{id}/clear", axum::routing::post(event_clear))
        .route("/live", get(live_stream))
        .route("/static/console.css", get(css))
        .route("/static/console.js", get(js))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(pages)
        .with_state(state)
}

/// Resolves the user from `Authorization`, or answers 401. The header is
/// never logged.
async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match state.access.authenticate(header) {
        Ok(user) => {
            tracing::debug!(user = %user.name, method = %request.method(), path = request.uri().path(), "request");
            request.extensions_mut().insert(user);
            next.run(request).await
        }
        Err(denied) => {
            tracing::info!(method = %request.method(), path = request.uri().path(), "unauthenticated request refused");
            PageError::Denied(denied).into_response()
        }
    }
}

fn ctx(state: &AppState, user: User) -> Ctx {
    Ctx {
        csrf: state.access.csrf_token(&user),
        user,
    }
}

/// A page for `user`: its content rendered with their context, in the
/// layout unless the page asked for its content alone.
fn page(
    state: &AppState,
    user: User,
    headers: &HeaderMap,
    (section, title, live): (Section, &str, Option<&str>),
    main: impl FnOnce(&Ctx) -> Markup,
) -> Response {
    let ctx = ctx(state, user);
    let main = main(&ctx);
    respond(headers, &ctx, section, title, live, main)
}

/// The whole page, or its content alone for the page's own refresh.
fn respond(
    headers: &HeaderMap,
    ctx: &Ctx,
    section: Section,
    title: &str,
    live: Option<&str>,
    main: Markup,
) -> Response {
    let fragment = headers.get("x-flow-fragment").is_some();
    let body = if fragment {
        main
    } else {
        pages::layout(ctx, section, title, live, main)
    };
    (
        [
            (header::CACHE_CONTROL, "no-store"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "same-origin"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; img-src 'self' data:; \
                 frame-ancestors 'none'; form-action 'self'",
            ),
        ],
        body,
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
struct SiteQuery {
    #[serde(default)]
    labels: String,
}

async fn site(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Query(q): Query<SiteQuery>,
) -> PageResult {
    let labels = pages::site::parse_filter(&q.labels).map_err(PageError::BadRequest)?;
    let list = state
        .client
        .call::<endpoint::RackList>(&RackList { labels })
        .await?;
    let ids: Vec<String> = list.racks.iter().map(|r| r.id.to_string()).collect();
    let mut racks = futures::stream::iter(ids.into_iter().map(|id| {
        let client = Arc::clone(&state.client);
        async move {
            client
                .call::<endpoint::RackGet>(&RackByRef { rack: RackRef(id) })
                .await
        }
    }))
    .buffered(RACK_READS)
    .collect::<Vec<_>>()
    .await
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    racks.sort_by(|a, b| a.name.cmp(&b.name));
    let recent = state
        .client
        .call::<endpoint::TaskList>(&TaskList {
            limit: Some(OPEN_TASKS_LOOKED_AT),
        })
        .await?;
    let mut open = BTreeMap::new();
    for t in recent.tasks.into_iter().filter(|t| t.status.is_open()) {
        open.entry(t.rack.clone()).or_insert(t);
    }
    let marks = safety_marks(&state, &racks).await?;
    Ok(page(
        &state,
        user,
        &headers,
        (Section::Site, "Site", Some("site")),
        |ctx| {
            pages::site::render(
                ctx,
                &racks,
                &open,
                &q.labels,
                &|rack, component| state.states.get(rack, component),
                &marks,
            )
        },
    ))
}

/// Locks from events, and racks whose power domain holds commands now.
async fn safety_marks(
    state: &AppState,
    racks: &[flow_protocol::api::RackRecord],
) -> Result<pages::site::Marks, PageError> {
    let mut marks = pages::site::Marks::default();
    let events = state
        .client
        .call::<endpoint::EventList>(&EventList {
            rack: None,
            limit: Some(1000),
        })
        .await?;
    for e in events.events {
        for l in e.locks {
            marks.locked.insert((l.rack, l.component), l.event_id);
        }
    }
    let domains = state
        .client
        .call::<endpoint::PowerDomainList>(&flow_protocol::power::PowerDomainList {})
        .await?;
    for d in domains.domains.iter().filter(|d| d.waiting > 0) {
        for r in racks.iter().filter(|r| r.power_domains.contains(&d.name)) {
            marks.held.entry(r.name.clone()).or_insert_with(|| {
                format!("power held in {}: {} commands waiting", d.name, d.waiting)
            });
        }
    }
    Ok(marks)
}

async fn tasks(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Query(filter): Query<pages::tasks::Filter>,
) -> PageResult {
    let limit = filter.limit.unwrap_or(200).clamp(1, 1000);
    let list = state
        .client
        .call::<endpoint::TaskList>(&TaskList { limit: Some(limit) })
        .await?;
    Ok(page(
        &state,
        user,
        &headers,
        (Section::Tasks, "Tasks", Some("tasks")),
        |_| pages::tasks::render(&list.tasks, &filter, list.tasks.len()),
    ))
}

async fn rack(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(rack): Path<String>,
) -> PageResult {
    let reply = state
        .client
        .call::<endpoint::RackPower>(&flow_protocol::power::RackPowerRequest {
            rack: flow_protocol::ids::RackRef(rack.clone()),
        })
        .await?;
    let title = format!("rack {rack}");
    Ok(page(
        &state,
        user,
        &headers,
        (Section::Site, &title, None),
        |_| pages::rack::render(&reply),
    ))
}

fn task_id(text: &str) -> Result<TaskId, PageError> {
    text.parse()
        .map_err(|_| PageError::BadRequest(format!("{text:?} is not a task ID")))
}

async fn task(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> PageResult {
    let id = task_id(&id)?;
    let record = state
        .client
        .call::<endpoint::TaskGet>(&TaskById { id })
        .await?;
    let topic = format!("task:{id}");
    let title = format!("{} {}", record.operation.as_str(), record.rack);
    Ok(page(
        &state,
        user,
        &headers,
        (Section::Tasks, &title, Some(&topic)),
        |ctx| pages::task::render(ctx, &record),
    ))
}

async fn audit(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Query(filter): Query<pages::audit::Filter>,
) -> PageResult {
    let list = state
        .client
        .call::<endpoint::AuditList>(&flow_protocol::audit::AuditList {
            actor: filter.actor(),
            rack: filter.rack(),
            endpoint: filter.endpoint(),
            limit: Some(500),
            ..Default::default()
        })
        .await?;
    Ok(page(
        &state,
        user,
        &headers,
        (Section::Audit, "Audit", None),
        |_| pages::audit::render(&list.records, &filter),
    ))
}

#[derive(Debug, Deserialize)]
struct EventsQuery {
    #[serde(default)]
    rack: String,
}

async fn events(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Query(q): Query<EventsQuery>,
) -> PageResult {
    let rack = Some(q.rack.trim()).filter(|r| !r.is_empty());
    let list = state
        .client
        .call::<endpoint::EventList>(&EventList {
            rack: rack.map(str::to_owned),
            limit: Some(200),
        })
        .await?;
    Ok(page(
        &state,
        user,
        &headers,
        (Section::Events, "Events", None),
        |_| pages::events::render_list(&list.events, rack),
    ))
}

fn event_id(text: &str) -> Result<EventId, PageError> {
    text.parse()
        .map_err(|_| PageError::BadRequest(format!("{text:?} is not an event ID")))
}

async fn event(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> PageResult {
    let id = event_id(&id)?;
    let record = state
        .client
        .call::<endpoint::EventGet>(&EventById { id })
        .await?;
    let title = format!("{} {}", record.event.event_type, record.event.component);
    Ok(page(
        &state,
        user,
        &headers,
        (Section::Events, &title, None),
        |ctx| pages::events::render_one(ctx, &record),
    ))
}

/// The Clear form: its token and the operator's reason.
#[derive(Debug, Deserialize)]
struct ClearForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
}

async fn event_clear(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ClearForm>,
) -> PageResult {
    let id = event_id(&id)?;
    may_act(&state, &user, &headers, &form.csrf)?;
    let record = state
        .client
        .call_on_behalf::<endpoint::EventClear>(
            &user.name,
            &actor(&user),
            &EventClear {
                id,
                reason: form.reason.clone(),
                by: user.name.clone(),
            },
        )
        .await?;
    tracing::info!(user = %user.name, event = %id, locks = record.locks.len(), "event cleared from the console");
    Ok(Redirect::to(&format!("/events/{id}")).into_response())
}

/// A form with only its CSRF token (a task's cancel).
#[derive(Debug, Deserialize)]
struct TokenForm {
    #[serde(default)]
    csrf: String,
}

/// An action form: its CSRF token and the action (`op` or `do`).
#[derive(Debug, Deserialize)]
struct ActionForm<A> {
    #[serde(default)]
    csrf: String,
    #[serde(alias = "op", rename = "do")]
    act: A,
}

/// An action's query (the confirmation page's address).
#[derive(Debug, Deserialize)]
struct ActionQuery<A> {
    #[serde(alias = "op", rename = "do")]
    act: A,
}

/// The access check of an action: operator, token, same origin.
fn may_act(
    state: &AppState,
    user: &User,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<(), PageError> {
    let h = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    state
        .access
        .may_act(
            user,
            csrf,
            h(header::ORIGIN),
            headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()),
            h(header::HOST),
        )
        .map_err(PageError::Denied)
}

fn confirm_page(
    state: &AppState,
    user: User,
    headers: &HeaderMap,
    section: Section,
    confirmation: &Confirmation<'_>,
) -> PageResult {
    let ctx = ctx(state, user);
    if !ctx.operator() {
        return Err(PageError::Denied(Denied::Forbidden));
    }
    let main = pages::confirm::render(&ctx, confirmation);
    Ok(respond(
        headers,
        &ctx,
        section,
        confirmation.what,
        None,
        main,
    ))
}

async fn cancel_confirm(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> PageResult {
    let id = task_id(&id)?;
    let record = state
        .client
        .call::<endpoint::TaskGet>(&TaskById { id })
        .await?;
    let what = format!("Cancel {} on {}", record.operation.as_str(), record.rack);
    confirm_page(
        &state,
        user,
        &headers,
        Section::Tasks,
        &Confirmation {
            what: &what,
            detail: "The task stops at its next action boundary; components already commanded keep the state they reached.",
            action: &format!("/tasks/{id}/cancel"),
            fields: &[],
            back: &format!("/tasks/{id}"),
            preview: None,
        },
    )
}

/// The `Flow-Actor` a console user's requests claim: `console:<user>`
/// (the console checked who they are). A verified scheduler that trusts
/// the console as an intermediary acts as the user it names in
/// `Flow-On-Behalf-Of` instead (docs/audit.md, "Through the console").
fn actor(user: &User) -> String {
    format!("console:{}", user.name)
}

async fn cancel(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<TokenForm>,
) -> PageResult {
    let id = task_id(&id)?;
    may_act(&state, &user, &headers, &form.csrf)?;
    let reply = state
        .client
        .call_on_behalf::<endpoint::TaskCancel>(&user.name, &actor(&user), &TaskById { id })
        .await?;
    tracing::info!(user = %user.name, task = %id, outcome = ?reply.outcome, "task cancel from the console");
    Ok(Redirect::to(&format!("/tasks/{id}")).into_response())
}

async fn power_confirm(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(rack): Path<String>,
    Query(q): Query<ActionQuery<actions::Power>>,
) -> PageResult {
    let op = q.act;
    let record = state
        .client
        .call::<endpoint::RackGet>(&RackByRef {
            rack: RackRef(rack.clone()),
        })
        .await?;
    let what = format!("Power {} rack {}", op.as_str(), record.name);
    let detail = format!(
        "Runs the rack's {} rule on its {} components.",
        op.operation().as_str(),
        record.components.len()
    );
    // The preview: what the submission would do, from its own checks
    // (`task.plan`), before the operator confirms.
    let preview = state
        .client
        .call::<endpoint::TaskPlan>(&power_request(&record.name, op.operation(), &user))
        .await?
        .results
        .into_iter()
        .next();
    confirm_page(
        &state,
        user,
        &headers,
        Section::Site,
        &Confirmation {
            what: &what,
            detail: &detail,
            action: &format!("/racks/{}/power", record.id),
            fields: &[("op", op.as_str())],
            back: "/",
            preview: preview.as_ref(),
        },
    )
}

/// The task request the console's power buttons submit.
fn power_request(rack: &str, operation: flow_rules::OperationCode, user: &User) -> TaskSubmit {
    TaskSubmit {
        description: format!("from the console by {}", user.name),
        ..TaskSubmit::new(
            format!("console-{}", uuid::Uuid::new_v4()),
            operation,
            vec![RackRef(rack.to_owned())],
        )
    }
}

async fn power(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(rack): Path<String>,
    Form(form): Form<ActionForm<actions::Power>>,
) -> PageResult {
    may_act(&state, &user, &headers, &form.csrf)?;
    let operation = form.act.operation();
    let request = power_request(&rack, operation, &user);
    let reply = state
        .client
        .call_on_behalf::<endpoint::TaskSubmit>(&user.name, &actor(&user), &request)
        .await?;
    let outcome = reply
        .results
        .into_iter()
        .next()
        .ok_or_else(|| PageError::BadRequest(format!("rack {rack:?}: no task was made")))?;
    match outcome.submission.task_id() {
        Some(id) => {
            tracing::info!(user = %user.name, rack = %rack, task = %id, operation = operation.as_str(), "power task from the console");
            Ok(Redirect::to(&format!("/tasks/{id}")).into_response())
        }
        None => match outcome.submission {
            flow_protocol::api::Submission::Refused(e) => Err(PageError::Api(ClientError::Api(e))),
            _ => Err(PageError::BadRequest(format!(
                "rack {rack:?}: no task was made"
            ))),
        },
    }
}

async fn runs(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
) -> PageResult {
    let list = state
        .client
        .call::<endpoint::RunList>(&RunList { limit: Some(100) })
        .await?;
    Ok(page(
        &state,
        user,
        &headers,
        (Section::Runs, "Rollouts", Some("runs")),
        |_| pages::runs::list(&list.runs),
    ))
}

async fn run(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(run): Path<String>,
) -> PageResult {
    let record = state
        .client
        .call::<endpoint::RunGet>(&RunByRef { run: run.clone() })
        .await?;
    let targets = state
        .client
        .call::<endpoint::RunTargets>(&RunTargets { run, phase: None })
        .await?;
    let title = format!("Rollout {}", record.name);
    Ok(page(
        &state,
        user,
        &headers,
        (Section::Runs, &title, Some("runs")),
        |ctx| pages::runs::one(ctx, &record, &targets.targets),
    ))
}

async fn run_confirm(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(run): Path<String>,
    Query(q): Query<ActionQuery<actions::Run>>,
) -> PageResult {
    let record = state
        .client
        .call::<endpoint::RunGet>(&RunByRef { run })
        .await?;
    let what = format!("{} rollout {}", q.act.verb(), record.name);
    confirm_page(
        &state,
        user,
        &headers,
        Section::Runs,
        &Confirmation {
            what: &what,
            detail: q.act.detail(),
            action: &format!("/runs/{}/act", record.id),
            fields: &[("do", q.act.as_str())],
            back: &format!("/runs/{}", record.id),
            preview: None,
        },
    )
}

async fn run_act(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(run): Path<String>,
    Form(form): Form<ActionForm<actions::Run>>,
) -> PageResult {
    may_act(&state, &user, &headers, &form.csrf)?;
    let by = RunByRef { run: run.clone() };
    let record = match form.act {
        actions::Run::Pause => {
            state
                .client
                .call_on_behalf::<endpoint::RunPause>(&user.name, &actor(&user), &by)
                .await?
        }
        actions::Run::Resume => {
            state
                .client
                .call_on_behalf::<endpoint::RunResume>(&user.name, &actor(&user), &by)
                .await?
        }
        actions::Run::Advance => {
            state
                .client
                .call_on_behalf::<endpoint::RunAdvance>(
                    &user.name,
                    &actor(&user),
                    &RunAdvance {
                        run,
                        expect_phase: None,
                    },
                )
                .await?
        }
        actions::Run::Cancel => {
            state
                .client
                .call_on_behalf::<endpoint::RunCancel>(&user.name, &actor(&user), &by)
                .await?
        }
    };
    tracing::info!(user = %user.name, run = %record.name, action = form.act.as_str(), "rollout action from the console");
    Ok(Redirect::to(&format!("/runs/{}", record.id)).into_response())
}

async fn schedules(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
) -> PageResult {
    let list = state
        .client
        .call::<endpoint::ScheduleList>(&ScheduleList::default())
        .await?;
    Ok(page(
        &state,
        user,
        &headers,
        (Section::Schedules, "Schedules", Some("schedules")),
        |_| pages::schedules::list(&list.schedules),
    ))
}

async fn schedule(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(schedule): Path<String>,
) -> PageResult {
    let record = state
        .client
        .call::<endpoint::ScheduleGet>(&ScheduleByRef::new(schedule.clone()))
        .await?;
    let history = state
        .client
        .call::<endpoint::ScheduleHistory>(&ScheduleByRef {
            schedule,
            limit: Some(50),
        })
        .await?;
    let title = format!("Schedule {}", record.name);
    Ok(page(
        &state,
        user,
        &headers,
        (Section::Schedules, &title, Some("schedules")),
        |ctx| pages::schedules::one(ctx, &record, &history.firings),
    ))
}

async fn schedule_confirm(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(schedule): Path<String>,
    Query(q): Query<ActionQuery<actions::Schedule>>,
) -> PageResult {
    let record = state
        .client
        .call::<endpoint::ScheduleGet>(&ScheduleByRef::new(schedule))
        .await?;
    let what = format!("{} schedule {}", q.act.verb(), record.name);
    confirm_page(
        &state,
        user,
        &headers,
        Section::Schedules,
        &Confirmation {
            what: &what,
            detail: q.act.detail(),
            action: &format!("/schedules/{}/act", record.id),
            fields: &[("do", q.act.as_str())],
            back: &format!("/schedules/{}", record.id),
            preview: None,
        },
    )
}

async fn schedule_act(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Path(schedule): Path<String>,
    Form(form): Form<ActionForm<actions::Schedule>>,
) -> PageResult {
    may_act(&state, &user, &headers, &form.csrf)?;
    let by = ScheduleByRef::new(schedule.clone());
    match form.act {
        actions::Schedule::Pause => {
            state
                .client
                .call_on_behalf::<endpoint::SchedulePause>(&user.name, &actor(&user), &by)
                .await?;
        }
        actions::Schedule::Resume => {
            state
                .client
                .call_on_behalf::<endpoint::ScheduleResume>(&user.name, &actor(&user), &by)
                .await?;
        }
        actions::Schedule::Trigger => {
            state
                .client
                .call_on_behalf::<endpoint::ScheduleTrigger>(&user.name, &actor(&user), &by)
                .await?;
        }
    }
    tracing::info!(user = %user.name, schedule = %schedule, action = form.act.as_str(), "schedule action from the console");
    Ok(Redirect::to(&format!("/schedules/{schedule}")).into_response())
}

#[derive(Debug, Deserialize)]
struct LiveQuery {
    topic: String,
}

async fn live_stream(State(state): State<AppState>, Query(q): Query<LiveQuery>) -> PageResult {
    let topic = Topic::parse(&q.topic).map_err(PageError::BadRequest)?;
    let sse = live::stream(state.nats.clone(), state.states.subscribe(), topic)
        .await
        .map_err(PageError::Subscribe)?;
    Ok(sse.into_response())
}

async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../static/console.css"),
    )
        .into_response()
}

async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../static/console.js"),
    )
        .into_response()
}
