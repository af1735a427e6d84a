//! Child processes the harness owns: started with their output in a log
//! file, measured from `/proc` (CPU seconds, peak RSS), stopped gently or
//! killed with SIGKILL, and started again with the same command line.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Linux reports CPU time in clock ticks of `USER_HZ`, which is 100 on every
/// architecture Linux supports for user space.
const TICKS_PER_SECOND: f64 = 100.0;

/// How to start a process again.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// What it is called in reports, e.g. `worker-2`.
    pub name: String,
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Where stdout and stderr go (appended).
    pub log: PathBuf,
    /// Run it as this user (via `setpriv`, which execs, so the pid is the
    /// program's own), e.g. `postgres`.
    pub run_as: Option<String>,
}

/// What a process used.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Usage {
    /// User + system CPU seconds.
    pub cpu_seconds: f64,
    /// Peak resident set (VmHWM), MiB.
    pub peak_rss_mib: f64,
}

/// A running child.
#[derive(Debug)]
pub struct Proc {
    recipe: Recipe,
    child: Option<Child>,
}

impl Proc {
    /// Starts it.
    pub fn spawn(recipe: Recipe) -> anyhow::Result<Proc> {
        // A fresh log for a fresh process; restarts append to it.
        File::create(&recipe.log)
            .map_err(|e| anyhow::anyhow!("cannot create log {}: {e}", recipe.log.display()))?;
        let mut p = Proc {
            recipe,
            child: None,
        };
        p.start()?;
        Ok(p)
    }

    fn start(&mut self) -> anyhow::Result<()> {
        let r = &self.recipe;
        let log = open_log(&r.log)?;
        let mut cmd = match &r.run_as {
            Some(user) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={user}"))
                    .arg(format!("--regid={user}"))
                    .arg("--init-groups")
                    .arg("--")
                    .arg(&r.program);
                c
            }
            None => Command::new(&r.program),
        };
        cmd.args(&r.args)
            .envs(r.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd.spawn().map_err(|e| {
            anyhow::anyhow!("cannot start {} ({}): {e}", r.name, r.program.display())
        })?;
        tracing::debug!(name = %r.name, pid = child.id(), "started");
        self.child = Some(child);
        Ok(())
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.recipe.name
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.recipe.log
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the process has not exited.
    pub fn running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// CPU and peak memory so far (zero once it has exited).
    pub fn usage(&self) -> Usage {
        self.pid().map(usage_of).unwrap_or_default()
    }

    /// SIGKILL, then reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) and returns at once.
    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(pid.to_string())
                .status();
        }
    }

    /// SIGTERM, waits up to `grace`, then SIGKILL.
    pub fn terminate(&mut self, grace: Duration) {
        self.signal_and_wait("TERM", grace);
    }

    /// Sends `signal` (e.g. `QUIT`: Postgres's immediate shutdown, no
    /// checkpoint, recovery at the next start), waits up to `grace`, then
    /// SIGKILL.
    pub fn signal_and_wait(&mut self, signal: &str, grace: Duration) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(c.id().to_string())
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        tracing::warn!(name = %self.recipe.name, "did not stop in time: killed");
        let _ = c.kill();
        let _ = c.wait();
    }

    /// Starts it again with the same command line (after a kill).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9();
        self.start()
    }

    /// Starts it again after it was stopped (no-op signal if running).
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        if self.running() {
            return Ok(());
        }
        self.child = None;
        self.start()
    }

    /// Starts it again after it was stopped, this once with `extra`
    /// arguments after its own (a scheduler's `--restored`); later
    /// restarts use its own command line.
    pub fn start_again_with(&mut self, extra: &[&str]) -> anyhow::Result<()> {
        if self.running() {
            return Ok(());
        }
        self.child = None;
        let own = self.recipe.args.clone();
        self.recipe
            .args
            .extend(extra.iter().map(|a| (*a).to_owned()));
        let started = self.start();
        self.recipe.args = own;
        started
    }

    /// Stops it gently (SIGTERM, `grace`) and starts `program` in its
    /// place with the same arguments and environment (an upgrade).
    pub fn replace_program(&mut self, program: &Path, grace: Duration) -> anyhow::Result<()> {
        self.terminate(grace);
        self.recipe.program = program.to_path_buf();
        self.child = None;
        self.start()
    }

    /// The program it runs.
    pub fn program(&self) -> &Path {
        &self.recipe.program
    }

    /// The last `n` lines of its log, for error messages.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.recipe.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn open_log(path: &Path) -> anyhow::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| anyhow::anyhow!("cannot open log {}: {e}", path.display()))
}

/// Reads `/proc/<pid>/stat` (utime, stime) and `/proc/<pid>/status` (VmHWM).
pub fn usage_of(pid: u32) -> Usage {
    let cpu_seconds = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the command name, which is in parentheses.
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = f.get(11)?.parse().ok()?;
            let stime: f64 = f.get(12)?.parse().ok()?;
            Some((utime + stime) / TICKS_PER_SECOND)
        })
        .unwrap_or_default();
    let peak_rss_mib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib / 1024.0)
        })
        .unwrap_or_default();
    Usage {
        cpu_seconds,
        peak_rss_mib,
    }
}

/// A TCP port nobody listens on now (bind to 0, read, close).
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(l.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_of_this_process_is_read_from_proc() {
        // Burn a little CPU so the figure is not zero.
        let mut x = 0u64;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        assert_ne!(x, 1);
        let u = usage_of(std::process::id());
        assert!(u.peak_rss_mib > 1.0, "{u:?}");
        assert!(u.cpu_seconds > 0.0, "{u:?}");
        assert_eq!(usage_of(u32::MAX).peak_rss_mib, 0.0);
    }
}
