//! The console in a real headless Chromium against a real stack (NATS,
//! Postgres, the scheduler, a worker, the rack simulator over HTTP): the
//! site shows the rack, a power-on started from the `flow` CLI moves the
//! task page's bars to completion without a reload, and actions need an
//! operator, this console's form token and its origin. Screenshots of each
//! page go to `FLOW_CONSOLE_SCREENSHOTS` (default: the target's tmp dir).

#[path = "support/cdp.rs"]
mod cdp;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cdp::{Browser, Tab};
use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;
use flow_worker::watch::WatchConfig;
use serde_json::{Value, json};

const OPERATOR: &str = "operator-token-for-tests-0001";
const VIEWER: &str = "viewer-token-for-tests-00002";

/// A power-on that moves step by step: shelves two at a time, switch trays
/// three, compute trays four, each verified on (and a quick power-off, as
/// a batch of power rules has both).
const RULE: &str = r#"version: v1
rules:
  - name: Console test power on
    operation_type: power_control
    operation: power_on
    steps:
      - component_type: powershelf
        stage: 1
        max_parallel: 2
        main_operation: {name: PowerControl}
        post_operation:
          - {name: VerifyPowerStatus, timeout: 30s, poll_interval: 100ms, parameters: {expected_status: on}}
          - {name: VerifyReachability, timeout: 60s, poll_interval: 200ms, parameters: {component_types: [compute, nvswitch]}}
      - component_type: nvswitch
        stage: 2
        max_parallel: 3
        main_operation: {name: PowerControl}
        post_operation:
          - {name: VerifyPowerStatus, timeout: 30s, poll_interval: 100ms, parameters: {expected_status: on}}
      - component_type: compute
        stage: 3
        max_parallel: 4
        main_operation: {name: PowerControl}
        post_operation:
          - {name: VerifyPowerStatus, timeout: 30s, poll_interval: 100ms, parameters: {expected_status: on}}
  - name: Console test power off
    operation_type: power_control
    operation: power_off
    steps:
      - {component_type: compute, stage: 1, main_operation: {name: PowerControl}}
      - {component_type: nvswitch, stage: 2, main_operation: {name: PowerControl}}
      - {component_type: powershelf, stage: 3, main_operation: {name: PowerControl}}
"#;

/// The `flow-console` binary, as a process, on a free port.
struct Console {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Console {
    fn start(nats_url: &str) -> Console {
        Console::start_on(nats_url, "127.0.0.1:0")
    }

    /// On `listen` (a fixed port, to start again where a page expects it).
    fn start_on(nats_url: &str, listen: &str) -> Console {
        let dir = std::env::temp_dir().join(format!("flow-console-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let url_file = dir.join("url");
        let child = Command::new(env!("CARGO_BIN_EXE_flow-console"))
            .args(["--listen", listen, "--url-file"])
            .arg(&url_file)
            .env("FLOW_NATS_URL", nats_url)
            .env("FLOW_CONSOLE_OPERATOR_TOKEN", OPERATOR)
            .env("FLOW_CONSOLE_VIEWER_TOKEN", VIEWER)
            .env_remove("FLOW_CONFIG")
            .env_remove("FLOW_CONSOLE_ACCESS_FILE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("console.log")).unwrap())
            .spawn()
            .expect("start flow-console");
        let started = Instant::now();
        let url = loop {
            if let Ok(text) = std::fs::read_to_string(&url_file)
                && text.ends_with('\n')
            {
                break text.trim().trim_end_matches('/').to_owned();
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "flow-console did not listen within 30 s: {}",
                std::fs::read_to_string(dir.join("console.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Console { child, url, dir }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `flow` CLI beside this crate's binary (scripts/test builds every
/// binary of the workspace before the tests).
fn flow_binary() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_flow-console")).with_file_name("flow");
    assert!(
        p.is_file(),
        "{} is missing: build the binaries first (cargo build --workspace --bins; scripts/test does)",
        p.display()
    );
    p
}

async fn flow(nats_url: &str, args: &[&str]) -> Output {
    let out = tokio::process::Command::new(flow_binary())
        .args(args)
        .env("FLOW_NATS_URL", nats_url)
        .env_remove("FLOW_CONFIG")
        .output()
        .await
        .expect("run flow");
    assert!(
        out.status.success(),
        "flow {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn screenshots_dir() -> PathBuf {
    let dir = std::env::var_os("FLOW_CONSOLE_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn screenshot(tab: &mut Tab, name: &str) {
    let png = tab.screenshot().await;
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{name}: not a screenshot ({} bytes)",
        png.len()
    );
    std::fs::write(screenshots_dir().join(format!("{name}.png")), png).unwrap();
}

/// Starts an action the way an operator does: `click` (JavaScript) opens
/// its confirmation page (a path ending in `confirm_path`, with the action's
/// form), the form is submitted, and the page it lands on satisfies `landed`.
async fn confirm_action(tab: &mut Tab, click: &str, confirm_path: &str, landed: &str) {
    tab.eval(click).await;
    tab.wait_for(
        &format!(
            "location.pathname.endsWith('{confirm_path}') && document.querySelector('form.action') !== null"
        ),
        Duration::from_secs(10),
    )
    .await;
    tab.eval("document.querySelector('form.action button').click()")
        .await;
    tab.wait_for(landed, Duration::from_secs(10)).await;
}

/// A rack of four components (2 compute, 1 switch, 1 shelf) at 1/20 of
/// real time, one worker.
async fn small_rack() -> Stack {
    Stack::builder()
        .simulator(SimConfig {
            time_scale: 0.05,
            compute: 2,
            nvswitch: 1,
            powershelf: 1,
            ..SimConfig::default()
        })
        .workers(1)
        .start()
        .await
}

async fn nvl72() -> Stack {
    Stack::builder()
        .simulator(SimConfig {
            time_scale: 0.25,
            initial_power: InitialPower::Off,
            ..SimConfig::default()
        })
        .workers(1)
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_site_shows_the_rack_and_a_power_on_from_the_cli_moves_the_bars_live() {
    let mut env = nvl72().await;
    // A watcher: each component's power and reachability for the tiles.
    env.start_watcher(WatchConfig {
        poll_every: Duration::from_millis(500),
        inventory_every: Duration::from_millis(500),
        ..WatchConfig::default()
    });
    let nats = env.nats.url();
    let rules =
        std::env::temp_dir().join(format!("flow-console-rule-{}.yaml", uuid::Uuid::new_v4()));
    std::fs::write(&rules, RULE).unwrap();
    flow(
        &nats,
        &["rule", "create", "--from-yaml", rules.to_str().unwrap()],
    )
    .await;
    std::fs::remove_file(&rules).unwrap();
    let console = Console::start(&nats);
    let browser = Browser::start();
    let mut tab = browser.tab().await;
    tab.bearer(VIEWER).await;

    // The site: the demo rack's 35 components, as tiles.
    tab.goto(&format!("{}/", console.url)).await;
    tab.wait_for(
        "document.querySelectorAll('[data-rack=\"rack-01\"] [data-component]').length === 35",
        Duration::from_secs(10),
    )
    .await;
    let kinds = tab
        .eval("[...document.querySelectorAll('.kind-name')].map(e => e.textContent).join(', ')")
        .await;
    assert_eq!(kinds, "Compute ×18, NVSwitch ×9, PowerShelf ×8");
    // The watcher has seen the shelves: off, their BMCs answering.
    tab.wait_for(
        "document.querySelectorAll('[data-component^=\"powershelf\"][data-power=\"off\"][data-reachable=\"reachable\"]').length === 8",
        Duration::from_secs(20),
    )
    .await;
    tab.until_live().await;
    // A viewer is offered no action.
    assert_eq!(
        tab.eval("document.querySelectorAll('a.button').length")
            .await,
        json!(0)
    );

    // An operator sees the rack's actions (the screenshots show them).
    tab.bearer(OPERATOR).await;
    tab.goto(&format!("{}/", console.url)).await;
    assert_eq!(
        tab.eval("[...document.querySelectorAll('a.button')].map(a => a.textContent).join(', ')")
            .await,
        "Power on, Power off"
    );
    tab.until_live().await;

    // A second tab stays on the site while the power-on runs.
    let mut site = browser.tab().await;
    site.bearer(VIEWER).await;
    site.goto(&format!("{}/", console.url)).await;
    site.until_live().await;
    site.eval("window.__flowMarker = 'site'").await;

    // A power-on from the CLI; the site marks the rack without a reload.
    tab.eval("window.__flowMarker = 'site'").await;
    let out = flow(&nats, &["--json", "power", "on", "--rack", "rack-01"]).await;
    let reply: Value = serde_json::from_slice(&out.stdout).expect("flow --json power on");
    let task = reply["results"][0]["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {reply}"))
        .to_owned();
    tab.wait_for(
        "document.querySelector('[data-rack=\"rack-01\"].busy .running a') !== null",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(tab.eval("window.__flowMarker").await, "site");

    // The task page: its bars move to completion, pushed, not reloaded.
    tab.goto(&format!("{}/tasks/{task}", console.url)).await;
    tab.eval("window.__flowMarker = 'task'").await;
    // Every value a bar shows, as the page shows it (no sampling gaps).
    tab.eval(
        "window.__flowSeen = []; new MutationObserver(() => { \
            for (const b of document.querySelectorAll('.bar[data-step]')) { \
                const v = b.dataset.step + ':' + b.dataset.done + '/' + b.dataset.total; \
                if (!window.__flowSeen.includes(v)) window.__flowSeen.push(v); } \
        }).observe(document.getElementById('main'), \
            {subtree: true, childList: true, attributes: true, attributeFilter: ['data-done']}); true",
    )
    .await;
    let sample = "JSON.stringify({marker: window.__flowMarker, \
        status: document.querySelector('dl.facts').dataset.status, \
        bars: [...document.querySelectorAll('.bar[data-step]')].map(b => \
            [b.dataset.step, b.dataset.status, +b.dataset.done, +b.dataset.total])})";
    let started = Instant::now();
    let mut samples: Vec<Value> = Vec::new();
    let mut shot_running = false;
    loop {
        let s: Value = serde_json::from_str(tab.eval(sample).await.as_str().unwrap()).unwrap();
        let status = s["status"].as_str().unwrap_or_default().to_owned();
        let partial = s["bars"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b[2].as_u64().unwrap() > 0 && b[2].as_u64() < b[3].as_u64());
        if partial && !shot_running {
            screenshot(&mut tab, "task-running").await;
            shot_running = true;
        }
        samples.push(s);
        if status == "completed" {
            break;
        }
        assert!(
            !matches!(status.as_str(), "failed" | "terminated"),
            "the power-on ended {status}: {:?}\n{}",
            samples.last(),
            env.task(&task).await
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the task page did not show completion within 120 s; last: {:?}",
            samples.last()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        samples.iter().all(|s| s["marker"] == "task"),
        "the page was reloaded"
    );
    let done_totals: Vec<u64> = samples
        .iter()
        .map(|s| {
            s["bars"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b[2].as_u64().unwrap())
                .sum()
        })
        .collect();
    let mut distinct = done_totals.clone();
    distinct.dedup();
    assert!(
        distinct.len() >= 4,
        "the bars did not move step by step: {distinct:?}"
    );
    // Between the records, the workers' progress moved the bars part-way.
    let seen: Vec<String> = serde_json::from_value(tab.eval("window.__flowSeen").await).unwrap();
    let part_way = seen
        .iter()
        .filter(|v| {
            let (done, total) = v.split_once(':').unwrap().1.split_once('/').unwrap();
            done != "0" && done != total
        })
        .count();
    assert!(
        part_way >= 2,
        "no bar was shown part-way between 0 and its total: {seen:?}"
    );
    let last = samples.last().unwrap();
    for bar in last["bars"].as_array().unwrap() {
        assert_eq!(bar[1], "completed", "{last}");
        assert_eq!(
            bar[2], bar[3],
            "a bar short of its total at the end: {last}"
        );
    }
    assert_eq!(last["bars"].as_array().unwrap().len(), 3, "{last}");
    // As drawn: each bar's filled part spans the whole bar.
    let filled = tab
        .eval(
            "[...document.querySelectorAll('.bar[data-step]')].map(b => \
                Math.round(100 * b.querySelector('.done').getBoundingClientRect().width \
                    / b.getBoundingClientRect().width))",
        )
        .await;
    assert_eq!(filled, json!([100, 100, 100]), "the bars as drawn");
    screenshot(&mut tab, "task").await;

    // The site tab, never reloaded, shows every component on and answering.
    site.wait_for(
        "document.querySelectorAll('[data-component][data-power=\"on\"][data-reachable=\"reachable\"]').length === 35",
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(site.eval("window.__flowMarker").await, "site");
    screenshot(&mut site, "site").await;
    drop(site);

    // The other pages, with something to show.
    tab.goto(&format!("{}/tasks", console.url)).await;
    assert_eq!(
        tab.eval(&format!(
            "document.querySelectorAll('tr[data-task=\"{task}\"]').length"
        ))
        .await,
        json!(1)
    );
    screenshot(&mut tab, "tasks").await;
    env.ok(
        "schedule.create",
        json!({"name": "nightly power-off", "spec": {"kind": "cron", "expression": "0 2 * * *"},
               "task": {"racks": ["rack-01"], "operation": "power_off"}}),
    )
    .await;
    let run = env
        .ok(
            "run.create",
            json!({"name": "power cycle", "task": {"racks": ["rack-01"], "operation": "power_off"},
                   "phases": {"equal": 1}, "max_concurrent": 1,
                   "gates": [{"kind": "failure_rate", "percent": 10}]}),
        )
        .await;
    tab.goto(&format!("{}/schedules", console.url)).await;
    assert_eq!(
        tab.eval("document.querySelectorAll('tr[data-schedule=\"nightly power-off\"]').length")
            .await,
        json!(1)
    );
    screenshot(&mut tab, "schedules").await;
    // The operator pauses it: its page, the link, the confirmation, paused.
    tab.eval("document.querySelector('tr[data-schedule=\"nightly power-off\"] a').click()")
        .await;
    tab.wait_for(
        "document.querySelector('.actions a.button') !== null",
        Duration::from_secs(10),
    )
    .await;
    confirm_action(
        &mut tab,
        "[...document.querySelectorAll('a.button')].find(a => a.textContent === 'Pause').click()",
        "/act",
        "document.querySelector('h1 .badge.s-paused') !== null",
    )
    .await;
    let paused = env
        .ok("schedule.get", json!({"schedule": "nightly power-off"}))
        .await;
    assert_eq!(paused["enabled"], false, "{paused}");
    tab.goto(&format!(
        "{}/runs/{}",
        console.url,
        run["id"].as_str().unwrap()
    ))
    .await;
    let gates = tab
        .eval("document.querySelector('.gates li').textContent")
        .await;
    assert_eq!(
        gates, "gate failure-rate=10% per phase: 0/1 failed (0.0 %)",
        "the gate's figure against its threshold"
    );
    screenshot(&mut tab, "rollout").await;

    drop(tab);
    drop(browser);
    drop(console);
    env.stop().await;
}

/// A form post as a browser sends it, with the headers given.
async fn post(url: &str, body: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.expect("post");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn actions_need_an_operator_this_consoles_token_and_its_origin() {
    let env = small_rack().await;
    let console = Console::start(&env.nats.url());
    let http = reqwest::Client::new();
    let base = &console.url;

    // No credentials: refused, and the browser is asked for them.
    let r = http.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert!(
        r.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Basic realm=\"Flow console\"")
    );
    let r = http
        .get(format!("{base}/"))
        .bearer_auth("wrong-token-wrong-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    // Basic credentials read the page.
    let r = http
        .get(format!("{base}/"))
        .basic_auth("viewer", Some(VIEWER))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let page = r.text().await.unwrap();
    assert!(page.contains("rack-01"), "{page}");
    assert!(!page.contains(VIEWER) && !page.contains(OPERATOR));

    // The operator's confirmation page carries the form token.
    let confirm = http
        .get(format!("{base}/racks/rack-01/power?op=on"))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // It previews what the submission would do before the button.
    assert!(
        confirm.contains("<h2>Preview</h2>") && confirm.contains("would create a task"),
        "{confirm}"
    );
    let csrf = confirm
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no csrf field: {confirm}"))
        .to_owned();
    let action = format!("{base}/racks/rack-01/power");
    let good = format!("csrf={csrf}&op=on");
    let bearer_op = format!("Bearer {OPERATOR}");
    let bearer_viewer = format!("Bearer {VIEWER}");
    for (what, body, headers, status) in [
        ("no credentials", good.as_str(), vec![], 401),
        (
            "a viewer",
            good.as_str(),
            vec![("authorization", bearer_viewer.as_str())],
            403,
        ),
        (
            "no form token",
            "op=on",
            vec![("authorization", bearer_op.as_str())],
            403,
        ),
        (
            "another user's token",
            "csrf=00ff00ff&op=on",
            vec![("authorization", bearer_op.as_str())],
            403,
        ),
        (
            "another site",
            good.as_str(),
            vec![
                ("authorization", bearer_op.as_str()),
                ("origin", "http://evil.example"),
            ],
            403,
        ),
        (
            "a cross-site fetch",
            good.as_str(),
            vec![
                ("authorization", bearer_op.as_str()),
                ("sec-fetch-site", "cross-site"),
            ],
            403,
        ),
    ] {
        let (got, text) = post(&action, body, &headers).await;
        assert_eq!(got, status, "{what}: {text}");
    }
    let tasks = env.ok("task.list", json!({})).await;
    assert_eq!(tasks, json!([]), "a refused action made a task");

    // In the browser, the operator confirms and lands on the new task.
    let browser = Browser::start();
    let mut tab = browser.tab().await;
    tab.headers(json!({ "Authorization": bearer_op })).await;
    tab.goto(&format!("{base}/")).await;
    confirm_action(
        &mut tab,
        "document.querySelector('[data-rack=\"rack-01\"] a.button[href$=\"op=on\"]').click()",
        "/power",
        "location.pathname.startsWith('/tasks/') && document.querySelector('dl.facts') !== null",
    )
    .await;
    let tasks = env.ok("task.list", json!({})).await;
    assert_eq!(tasks.as_array().unwrap().len(), 1, "{tasks}");
    assert_eq!(tasks[0]["description"], "from the console by operator");
    // The audit log names the console's user for it (docs/audit.md).
    let audit = env
        .ok("audit.list", json!({"endpoint": "task.submit"}))
        .await;
    let records = audit["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{audit}");
    assert_eq!(records[0]["claimed_actor"], "console:operator");
    assert_eq!(records[0]["actor"], "development");
    assert_eq!(records[0]["actor_source"], "development");
    let shown = tab
        .eval("document.querySelector('dl.facts').dataset.task")
        .await;
    assert_eq!(shown, tasks[0]["id"]);
    drop(tab);
    drop(browser);
    drop(console);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_catches_up_when_its_event_stream_comes_back() {
    let env = small_rack().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let console = Console::start_on(&env.nats.url(), &listen);
    let browser = Browser::start();
    let mut tab = browser.tab().await;
    tab.bearer(VIEWER).await;
    tab.goto(&format!("{}/tasks", console.url)).await;
    tab.until_live().await;
    tab.eval("window.__flowMarker = 'tasks'").await;
    assert_eq!(
        tab.eval("document.querySelectorAll('tr[data-task]').length")
            .await,
        json!(0)
    );

    // The console goes away; the page says so and keeps what it showed.
    drop(console);
    tab.wait_for(
        "document.getElementById('live-state').textContent.includes('reconnecting')",
        Duration::from_secs(10),
    )
    .await;
    // A task starts while nobody pushes anything to the page.
    let outcome = env
        .ok(
            "task.submit",
            json!({"request_id": "while-the-console-is-down", "racks": ["rack-01"], "operation": "power_on"}),
        )
        .await;
    let task = outcome["results"][0]["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {outcome}"))
        .to_owned();

    // It ends before the console is back: no later event would tell the
    // page. Back on the same address, the stream reopens and the page
    // catches up by itself, without a reload.
    let finished = env.finish(&task).await;
    assert_eq!(finished["status"], "completed", "{finished}");
    let console = Console::start_on(&env.nats.url(), &listen);
    tab.wait_for(
        &format!("document.querySelector('tr[data-task=\"{task}\"]') !== null"),
        Duration::from_secs(30),
    )
    .await;
    tab.until_live().await;
    assert_eq!(tab.eval("window.__flowMarker").await, "tasks");
    drop(tab);
    drop(browser);
    drop(console);
    env.stop().await;
}

/// A leak locks its tray: the site marks the tile, the Events page shows
/// the event with its lock, and an operator clears it there with a reason,
/// which lifts the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leak_locks_the_tile_and_an_operator_clears_it_with_a_reason() {
    let env = small_rack().await;
    let event = env
        .ok(
            "event.publish",
            json!({"source": "console-test", "key": "leak-1", "event_type": "hardware.leak.detected",
                   "severity": "critical", "rack": "rack-01", "component": "compute-01",
                   "message": "drip tray wet", "observed_at": "2026-12-05T00:00:00Z"}),
        )
        .await;
    let id = event["id"].as_str().expect("an event ID").to_owned();
    let console = Console::start(&env.nats.url());
    let browser = Browser::start();
    let mut tab = browser.tab().await;
    tab.bearer(OPERATOR).await;

    // The site: the leaking tray's square is marked and the tile links
    // to the event (the lock is written with the event, so no wait).
    tab.goto(&format!("{}/", console.url)).await;
    tab.wait_for(
        "document.querySelector('[data-rack=\"rack-01\"] [data-component=\"compute-01\"][data-locked]') !== null",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        tab.eval("document.querySelectorAll('[data-locked]').length")
            .await,
        json!(1),
        "only the leaking tray is locked"
    );
    assert_eq!(
        tab.eval("document.querySelector('[data-rack=\"rack-01\"] p.lock a').getAttribute('href')")
            .await,
        json!(format!("/events/{id}"))
    );
    screenshot(&mut tab, "event-locked-site").await;

    // The Events page lists it with its lock; its page offers Clear.
    tab.goto(&format!("{}/events", console.url)).await;
    assert_eq!(
        tab.eval(&format!(
            "document.querySelector('tr[data-event=\"{id}\"]').dataset.locks"
        ))
        .await,
        json!("1")
    );
    tab.goto(&format!("{}/events/{id}", console.url)).await;
    assert_eq!(
        tab.eval(
            "[...document.querySelectorAll('ul.locks li')].map(l => l.dataset.component).join(',')"
        )
        .await,
        json!("compute-01")
    );
    screenshot(&mut tab, "event-locked").await;
    // A viewer gets no form.
    let mut viewer = browser.tab().await;
    viewer.bearer(VIEWER).await;
    viewer.goto(&format!("{}/events/{id}", console.url)).await;
    assert_eq!(
        viewer
            .eval("document.querySelectorAll('form.clear').length")
            .await,
        json!(0)
    );

    // Clear with a reason: the lock goes, the reason stays on the event.
    tab.eval(
        "document.querySelector('form.clear textarea').value = 'tray replaced, dry'; \
         document.querySelector('form.clear button').click(); true",
    )
    .await;
    tab.wait_for(
        "document.querySelector('dd.cleared .reason') !== null",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        tab.eval("document.querySelector('dd.cleared .reason').textContent")
            .await,
        json!("tray replaced, dry")
    );
    assert_eq!(
        tab.eval("document.querySelectorAll('ul.locks li').length")
            .await,
        json!(0)
    );
    let stored = env.ok("event.get", json!({ "id": id })).await;
    assert_eq!(stored["cleared_reason"], "tray replaced, dry", "{stored}");
    // The Audit page: the clear, by the development user (the stack's
    // scheduler verifies no identity) claiming the console's operator,
    // with its reason.
    tab.goto(&format!("{}/audit?endpoint=event.clear", console.url))
        .await;
    assert_eq!(
        tab.eval(
            "[...document.querySelectorAll('tr[data-endpoint]')].map(r => \
                [r.dataset.outcome, r.querySelector('td.actor').textContent, \
                 r.querySelector('td.reason').textContent])"
        )
        .await,
        json!([[
            "ok",
            "development (claims console:operator)",
            "tray replaced, dry"
        ]])
    );
    screenshot(&mut tab, "audit").await;
    assert_eq!(stored["locks"], json!([]), "{stored}");
    tab.goto(&format!("{}/", console.url)).await;
    tab.wait_for(
        "document.querySelector('[data-component=\"compute-01\"]') !== null",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        tab.eval("document.querySelectorAll('[data-locked]').length")
            .await,
        json!(0)
    );
    drop(viewer);
    drop(tab);
    drop(browser);
    drop(console);
    env.stop().await;
}
