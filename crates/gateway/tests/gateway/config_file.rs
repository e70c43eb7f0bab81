//! `gateway --config FILE`: a gateway started from a file (its flags
//! through `Args` → `Config` → `Gateway::new`) in front of simulated
//! backends takes the file's `[gateway]` table and its layers' tables;
//! the binary refuses a bad file with exit 2.

use std::time::Duration;

use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;
use tower_model_balance_sim::{protocol, ModelServer, ServerConfig};

use crate::gateway::{self, Running};
use tower_model_balance_gateway::args::Args;

/// Three simulated backends, and the gateway `--config` a file of
/// `[[gateway.backends]]` for them and `tables` starts, with `flags` after.
async fn from_file(name: &str, tables: &str, flags: &[&str]) -> Running {
    let mut sims = Vec::new();
    let mut text = String::from("[gateway]\nreceipt_header = true\nplacement = false\n");
    for i in 0..3 {
        let sim = ModelServer::start(&format!("{name}-{i}"), ServerConfig::default())
            .await
            .unwrap();
        text += &format!(
            "[[gateway.backends]]\nname = \"{}\"\nurl = \"{}\"\n",
            sim.name(),
            Origin::http(sim.addr())
        );
        sims.push(sim);
    }
    text += tables;
    let dir = std::env::temp_dir().join(format!("gateway-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let mut argv = vec!["--config".to_owned(), path.to_str().unwrap().to_owned()];
    argv.extend(flags.iter().map(|f| f.to_string()));
    let args = Args::parse(argv).unwrap();
    let mut config = args.config().unwrap();
    config.residency_header = Some(protocol::RESIDENT_MODELS_HEADER);
    assert_eq!(
        config.backends[0].0,
        BackendId::new(&format!("{name}-0")).unwrap()
    );
    gateway::serve(config, sims).await
}

/// The owners of the receipt of one completion.
async fn owners(gw: &Running) -> String {
    let body = r#"{"model": "llama-3-8b", "prompt": "hi", "max_tokens": 1}"#;
    let reply = gw.post(protocol::COMPLETIONS_PATH, body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let receipt = reply.headers["x-route-receipt"].to_str().unwrap();
    let owners = receipt.split("; ").find_map(|f| f.strip_prefix("owners="));
    owners.unwrap_or_else(|| panic!("{receipt}")).to_owned()
}

/// `[balance] min_owners = 3` (with `owners = 3`) reaches the balancer: a
/// model's first request already has three owners, where the gateway's
/// default gives it one; `--owners` on the command line goes over the
/// file's `owners`.
#[tokio::test]
async fn a_file_table_reaches_the_balancer_and_a_flag_overrides_it() {
    let three = "[balance]\nowners = 3\nmin_owners = 3\n";
    let gw = from_file("cf-three", three, &[]).await;
    assert_eq!(owners(&gw).await, "3");
    let gw = from_file("cf-none", "", &[]).await;
    assert_eq!(owners(&gw).await, "1");
    let two = "[balance]\nowners = 3\nmin_owners = 2\n";
    let gw = from_file("cf-flag", two, &["--owners", "2"]).await;
    assert_eq!(owners(&gw).await, "2");
}

/// A bad file stops the binary before it serves: exit 2, the file and
/// the key named, no panic.
#[tokio::test]
async fn the_binary_exits_2_on_a_bad_file() {
    let dir = std::env::temp_dir().join(format!("gateway-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad-range.toml");
    std::fs::write(&bad, "[hedge]\npercentile = 2.0\n").unwrap();
    for (path, says) in [
        (bad.to_str().unwrap(), "`hedge.percentile` must be"),
        (
            "/nonexistent/gateway.toml",
            "--config /nonexistent/gateway.toml: ",
        ),
    ] {
        let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_gateway"))
            .args(["--config", path, "--listen", "127.0.0.1:0"])
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .unwrap()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
