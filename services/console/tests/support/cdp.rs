//! A headless Chromium driven over the DevTools protocol: just what the
//! console's browser tests need (navigate, evaluate, screenshot, headers).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The Chromium binary: `FLOW_CHROMIUM`, else `chromium` on the PATH
/// (scripts/test installs Debian's when missing).
pub fn chromium_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("FLOW_CHROMIUM") {
        return PathBuf::from(p);
    }
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        for name in ["chromium", "chromium-browser"] {
            let p = Path::new(dir).join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "no chromium: install Debian's (apt-get install chromium; scripts/test does) or set \
         FLOW_CHROMIUM"
    );
}

/// A browser process and its profile directory (both gone on drop).
pub struct Browser {
    child: Child,
    profile: PathBuf,
    port: u16,
}

impl Browser {
    /// Starts headless Chromium on a free DevTools port.
    pub fn start() -> Browser {
        let profile = std::env::temp_dir().join(format!("flow-chromium-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&profile).expect("profile dir");
        let child = Command::new(chromium_binary())
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1440,1000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        let file = profile.join("DevToolsActivePort");
        let started = Instant::now();
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&file)
                && let Some(port) = text.lines().next().and_then(|l| l.trim().parse().ok())
            {
                break port;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "chromium wrote no DevToolsActivePort within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Browser {
            child,
            profile,
            port,
        }
    }

    /// A new tab, attached.
    pub async fn tab(&self) -> Tab {
        let version: Value = http_json(self.port, "PUT", "/json/new?about:blank").await;
        let ws = version["webSocketDebuggerUrl"]
            .as_str()
            .unwrap_or_else(|| panic!("no webSocketDebuggerUrl in {version}"))
            .to_owned();
        let (socket, _) = tokio_tungstenite::connect_async(ws)
            .await
            .expect("connect to the tab");
        let mut tab = Tab { socket, next_id: 0 };
        tab.call("Page.enable", json!({})).await;
        tab.call("Network.enable", json!({})).await;
        tab
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

async fn http_json(port: u16, method: &str, path: &str) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("devtools http");
    s.write_all(
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .expect("write");
    // Read the head, then exactly Content-Length bytes (the DevTools
    // server keeps the connection open).
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head_len, body_len) = loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk))
            .await
            .expect("devtools http answers within 10 s")
            .expect("read");
        assert!(
            n > 0,
            "devtools http closed early: {}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .expect("a content-length");
            break (end + 4, length);
        }
    };
    while buf.len() < head_len + body_len {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk))
            .await
            .expect("devtools http answers within 10 s")
            .expect("read");
        assert!(n > 0, "devtools http closed early");
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let body = &text[head_len..];
    serde_json::from_str(body).unwrap_or_else(|e| panic!("devtools {path}: {e}: {text}"))
}

/// One tab's DevTools session.
pub struct Tab {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Tab {
    /// Calls a DevTools method and returns its result (events in between
    /// are skipped).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.socket
            .send(Message::text(
                json!({"id": id, "method": method, "params": params}).to_string(),
            ))
            .await
            .expect("send to the tab");
        let reply = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let msg = self
                    .socket
                    .next()
                    .await
                    .expect("the tab closed")
                    .expect("read from the tab");
                let Message::Text(text) = msg else { continue };
                let v: Value = serde_json::from_str(&text).expect("devtools json");
                if v["id"] == id {
                    return v;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{method}: no answer within 30 s"));
        if let Some(e) = reply.get("error") {
            panic!("{method}: {e}");
        }
        reply["result"].clone()
    }

    /// Sends these headers with every request of the tab (its fetches and
    /// event streams too).
    pub async fn headers(&mut self, headers: Value) {
        self.call("Network.setExtraHTTPHeaders", json!({ "headers": headers }))
            .await;
    }

    /// Opens `url` and waits until its document has loaded.
    pub async fn goto(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url })).await;
        self.wait_for(
            "document.readyState === 'complete' && location.href !== 'about:blank'",
            Duration::from_secs(30),
        )
        .await;
    }

    /// The value of a JavaScript expression (awaited if a promise).
    pub async fn eval(&mut self, expression: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Waits until `condition` (JavaScript) is true; polls every 100 ms.
    pub async fn wait_for(&mut self, condition: &str, limit: Duration) {
        let started = Instant::now();
        loop {
            if self.eval(&format!("Boolean({condition})")).await == json!(true) {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "not true within {limit:?}: {condition}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the page's live stream is open (its header says so).
    pub async fn until_live(&mut self) {
        self.wait_for(
            "document.getElementById('live-state').textContent.includes('live')",
            Duration::from_secs(10),
        )
        .await;
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub async fn bearer(&mut self, token: &str) {
        self.headers(json!({ "Authorization": format!("Bearer {token}") }))
            .await;
    }

    /// A PNG of the page as shown.
    pub async fn screenshot(&mut self) -> Vec<u8> {
        let r = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("screenshot data"))
            .expect("screenshot base64")
    }
}
