//! `flow bmc` against the rack simulator: the diagnostic drives one BMC
//! through the same managers the workers use.

use std::process::Output;
use std::time::{Duration, Instant};

use flow_rack_sim::{InitialPower, SimConfig};

async fn flow(args: &[&str], password: &str) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(args)
        .env("FLOW_TEST_BMC_PW", password)
        .output()
        .await
        .expect("run flow")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_bmc_reads_and_drives_a_simulated_bmc() {
    let sim = flow_rack_sim::start(SimConfig {
        admin_port: 0,
        time_scale: 0.01,
        initial_power: InitialPower::On,
        compute: 1,
        nvswitch: 1,
        powershelf: 1,
        // Updates name images no origin serves: the update API alone.
        fetch_images: false,
        ..SimConfig::default()
    })
    .await
    .expect("simulator");
    let compute = sim.bmc_url("rack-01", "compute-01").expect("compute url");
    let shelf = sim.bmc_url("rack-01", "powershelf-01").expect("shelf url");
    let auth = ["--user", "root", "--password-env", "FLOW_TEST_BMC_PW"];
    let cmd = |url: &str, rest: &[&str]| {
        let mut v: Vec<String> = vec!["bmc".into(), url.into()];
        v.extend(auth.iter().map(|s| s.to_string()));
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    };
    let run = |args: Vec<String>, pw: &'static str| async move {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        flow(&refs, pw).await
    };

    let out = run(cmd(&compute, &["power-status"]), "0penBmc").await;
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert_eq!(text(&out).0, "On\n");

    let out = run(cmd(&compute, &["power", "force_power_off"]), "0penBmc").await;
    assert_eq!(
        text(&out).0,
        "sent ResetType ForceOff\n",
        "{:?}",
        text(&out)
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = run(cmd(&compute, &["--json", "power-status"]), "0penBmc").await;
        let v: serde_json::Value = serde_json::from_str(text(&out).0.trim()).expect("json");
        if v["power"] == "Off" {
            break;
        }
        assert!(Instant::now() < deadline, "never Off: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = run(cmd(&compute, &["power", "power_off"]), "0penBmc").await;
    assert_eq!(text(&out).0, "already Off: nothing sent\n");

    let out = run(cmd(&compute, &["firmware-status"]), "0penBmc").await;
    assert!(
        text(&out).0.contains("FW_BMC_0\t25.06-2"),
        "{:?}",
        text(&out)
    );
    let out = run(
        cmd(
            &compute,
            &[
                "firmware-update",
                "http://images.local/bmc-26.01.bin",
                "--version",
                "26.01",
            ],
        ),
        "0penBmc",
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(text(&out).0.starts_with("Completed"), "{:?}", text(&out));
    assert!(text(&out).0.contains("FW_BMC_0\t26.01"), "{:?}", text(&out));

    // A permanent refusal and bad credentials exit 1 with their class.
    let out = run(
        cmd(&shelf, &["--kind", "powershelf", "power", "restart"]),
        "0penBmc",
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).1.contains("power shelves cannot restart")
            && text(&out).1.ends_with("(permanent)\n")
    );
    let out = run(cmd(&compute, &["power-status"]), "not-the-password").await;
    assert_eq!(out.status.code(), Some(1));
    let (_, err) = text(&out);
    assert!(
        err.contains("HTTP 401") && err.ends_with("(permanent)\n"),
        "{err}"
    );
    assert!(!err.contains("not-the-password"));
    // No credentials at all is a usage error.
    let out = flow(&["bmc", &compute, "power-status"], "").await;
    assert_eq!(out.status.code(), Some(2));
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_bmc_probe_reports_what_it_finds_and_the_profile_it_resembles() {
    let choice = |s: &str| s.parse::<flow_rack_sim::ProfileChoice>().unwrap();
    let sim = flow_rack_sim::start(SimConfig {
        admin_port: 0,
        time_scale: 0.01,
        initial_power: InitialPower::On,
        compute: 3,
        nvswitch: 1,
        powershelf: 1,
        profiles: vec![
            choice("rack-01/compute-02=multi-system"),
            choice("rack-01/nvswitch-01=action-info"),
            choice("rack-01/powershelf-01=no-links"),
            choice("rack-01/compute-03=session-only"),
        ],
        // Updates name images no origin serves: the update API alone.
        fetch_images: false,
        ..SimConfig::default()
    })
    .await
    .expect("simulator");
    let probe = |name: &'static str, kind: &'static str| {
        let url = sim.bmc_url("rack-01", name).expect("url");
        async move {
            let out = flow(
                &[
                    "bmc",
                    &url,
                    "--user",
                    "root",
                    "--password-env",
                    "FLOW_TEST_BMC_PW",
                    "--kind",
                    kind,
                    "probe",
                ],
                "0penBmc",
            )
            .await;
            assert_eq!(out.status.code(), Some(0), "{name}: {:?}", text(&out));
            text(&out).0
        }
    };
    let standard = probe("compute-01", "compute").await;
    for line in [
        "service root\tVendor NVIDIA, Product GB200 NVL, Redfish 1.17.0\n",
        "system\t/redfish/v1/Systems/System_0 (Physical), PowerState On, reset On,ForceOn,GracefulShutdown,ForceOff,GracefulRestart,ForceRestart,PowerCycle\n",
        "power resource\t/redfish/v1/Systems/System_0\n",
        "update service\tSimpleUpdate; firmware FW_BMC_0, UEFI\n",
        "sessions\t/redfish/v1/SessionService/Sessions\n",
        "auth\tsession\n",
        "basic\taccepted\n",
        "events\t/redfish/v1/EventService/SSE\n",
        "resembles\tstandard\n",
    ] {
        assert!(standard.contains(line), "missing {line:?} in\n{standard}");
    }
    let multi = probe("compute-02", "compute").await;
    assert!(
        multi.contains("system\t/redfish/v1/Systems/DPU_0 (DPU)"),
        "{multi}"
    );
    assert!(
        multi.contains("power resource\t/redfish/v1/Systems/System_0\n"),
        "{multi}"
    );
    assert!(multi.contains("resembles\tmulti-system\n"), "{multi}");
    let info = probe("nvswitch-01", "nvswitch").await;
    assert!(info.contains("(ActionInfo)"), "{info}");
    assert!(info.contains("resembles\taction-info\n"), "{info}");
    let shelf = probe("powershelf-01", "powershelf").await;
    assert!(shelf.contains(", no Links\n"), "{shelf}");
    assert!(
        shelf.contains("power resource\t/redfish/v1/Chassis/powershelf\n"),
        "{shelf}"
    );
    assert!(shelf.contains("resembles\tno-links\n"), "{shelf}");
    let sessions_only = probe("compute-03", "compute").await;
    assert!(
        sessions_only.contains("basic\trefused (sessions only)\n")
            && sessions_only.contains("auth\tsession\n"),
        "{sessions_only}"
    );
    assert!(
        sessions_only.contains("resembles\tsession-only\n"),
        "{sessions_only}"
    );
    sim.shutdown().await;
}
