//! Every NATS server configuration Flow ships (compose's single server and
//! cluster nodes, `examples/nats`) is one `nats-server` accepts, and syncs
//! every JetStream write to disk before acknowledging it
//! (`sync_interval: always`), as the tests' own servers do.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// `nats-server -c <file> -t`: the server's own check of the file.
fn server_accepts(file: &Path, env: &[(&str, &str)]) {
    let out = Command::new(flow_tests::nats_server_binary())
        .arg("-c")
        .arg(file)
        .arg("-t")
        .envs(env.iter().copied())
        .output()
        .expect("nats-server runs");
    assert!(
        out.status.success(),
        "nats-server refuses {}: {}{}",
        file.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `jetstream { … }` block of a config file says `sync_interval: always`.
fn syncs_always(file: &Path) {
    let text = std::fs::read_to_string(file).expect("the file");
    let block = text
        .split_once("jetstream {")
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(block, _)| block)
        .unwrap_or_else(|| panic!("{} has no jetstream {{ … }} block", file.display()));
    let sync = block
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .find(|l| l.starts_with("sync_interval"));
    assert_eq!(
        sync,
        Some("sync_interval: always"),
        "{}: JetStream must sync every write",
        file.display()
    );
}

#[test]
fn every_shipped_nats_config_is_valid_and_syncs_always() {
    let passwords = [
        ("FLOW_NATS_SCHEDULER_PASSWORD", "s"),
        ("FLOW_NATS_WORKER_PASSWORD", "w"),
        ("FLOW_NATS_OPERATOR_PASSWORD", "o"),
    ];
    let files: [(&str, &[(&str, &str)]); 3] = [
        ("compose/nats/nats.conf", &[]),
        (
            "compose/nats/cluster.conf",
            &[("NATS_SERVER_NAME", "nats-1")],
        ),
        ("examples/nats/nats-server.conf", &passwords),
    ];
    for (file, env) in files {
        let path = repo(file);
        server_accepts(&path, env);
        syncs_always(&path);
    }
}

/// The compose files start every NATS server from one of those files and
/// nothing else: no `-js`, which would run JetStream with the lazy default.
#[test]
fn compose_starts_nats_only_from_the_checked_files() {
    for (file, services) in [
        ("compose/docker-compose.yml", &["nats"][..]),
        (
            "compose/docker-compose.cluster.yml",
            &["nats", "nats-2", "nats-3"][..],
        ),
    ] {
        let text = std::fs::read_to_string(repo(file)).expect("the compose file");
        let doc: serde_json::Value =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{file} is not YAML: {e}"));
        for service in services {
            let s = &doc["services"][service];
            let command: Vec<&str> = s["command"]
                .as_array()
                .unwrap_or_else(|| panic!("{file}: {service} has no command list"))
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(command.len(), 2, "{file}: {service}: {command:?}");
            assert_eq!(command[0], "-c", "{file}: {service}: {command:?}");
            let mounted = s["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|v| v.as_str())
                .find(|v| v.contains(&format!(":{}:", command[1])))
                .unwrap_or_else(|| panic!("{file}: {service} does not mount {}", command[1]));
            let local = mounted.split(':').next().unwrap().trim_start_matches("./");
            syncs_always(&repo(&format!("compose/{local}")));
        }
    }
    // The cluster's scheduler replicates every stream on the three nodes.
    let text = std::fs::read_to_string(repo("compose/docker-compose.cluster.yml")).unwrap();
    let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        doc["services"]["scheduler"]["environment"]["FLOW_JETSTREAM_REPLICAS"],
        "3"
    );
}
