//! The LLM half of the crate against real vLLM: two vLLM 0.32.0 servers
//! (CPU build, one core each, a tiny model built here) behind the gateway's
//! app (`crates/gateway`), driven by the official `openai` Python client and by
//! reqwest, each answer compared with the same call made directly.
//!
//! A test binary of its own with its own runner (`harness = false`): the
//! servers take one to eight minutes to start, so they start once and the
//! checks run in order over them, the ones that kill or stop a server
//! last. Each check prints `test real_vllm::NAME ... ok` (or `FAILED`
//! with its panic) and its figures; the last line sums them up. Without
//! vLLM installed (`bash scripts/vllm-venv`, which `.ci/run` runs) every
//! check is reported `SKIPPED` with the reason, in the test output —
//! except under `CI`, where a missing vLLM fails.
//!
//! No sleeps but bounded polls of a count or a state: a server's
//! `/health`, a metric, the balancer's view.

mod affinity;
mod api;
mod drain;
mod fixture;
mod fleet;
mod gateway;
mod hedge;
mod precise;
mod precise_workload;
mod router;
mod text;

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;

use fixture::Vllm;
use gateway::Running;

/// What the checks share: the servers and three gateways in front of
/// them, one routing by the model alone, one with prefix affinity, one by
/// the servers' KV-cache events.
struct Fleet {
    servers: Vec<Vllm>,
    model_only: Running,
    prefix: Running,
    kv: Running,
}

/// The checks, in the order they run: those that stop or kill a server
/// come last.
const CHECKS: [&str; 15] = [
    "openai_client_sees_no_difference",
    "client_stack_streams_from_vllm",
    "routes_pass_through",
    "error_bodies_are_vllm_s",
    "ttft_within_5_ms_of_direct",
    "closed_stream_is_aborted_on_the_server",
    "a_lost_hedge_is_aborted_on_the_server",
    "prefix_affinity_raises_vllm_s_hit_rate",
    "kv_events_route_to_what_vllm_caches",
    "ttft_and_tpot_are_histograms",
    "sigterm_drains_every_stream",
    "a_stopped_server_is_ejected",
    "a_killed_server_fails_only_its_own_streams",
    "a_restarted_server_gets_traffic_within_5_s",
    "kv_index_forgets_a_restarted_server",
];

fn main() -> ExitCode {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    // `cargo test -- NAME` runs the binaries whose tests match; a filter
    // naming none of these checks runs none (and starts no server).
    let selected: Vec<&str> = CHECKS
        .iter()
        .copied()
        .filter(|c| filter.is_empty() || filter.iter().any(|f| c.contains(f.as_str())))
        .collect();
    if selected.is_empty() || std::env::args().any(|a| a == "--list") {
        return ExitCode::SUCCESS;
    }
    let python = match fixture::installed() {
        Ok(python) => python,
        Err(reason) => {
            if std::env::var_os("CI").is_some() {
                eprintln!("{reason}: under CI the real-vLLM tests must run");
                return ExitCode::FAILURE;
            }
            for check in &selected {
                println!("test real_vllm::{check} ... SKIPPED ({reason})");
            }
            println!("\nreal_vllm: {} checks SKIPPED: {reason}\n", selected.len());
            return ExitCode::SUCCESS;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(python, selected))
}

async fn run(python: std::path::PathBuf, selected: Vec<&'static str>) -> ExitCode {
    let started = tokio::time::Instant::now();
    let servers = fixture::fleet(&python).await;
    let model_only = gateway::start(&servers, false).await;
    let prefix = gateway::start(&servers, true).await;
    let kv = gateway::start_kv(&servers).await;
    println!(
        "real_vllm: 2 vLLM servers ready in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let fleet = Arc::new(Fleet {
        servers,
        model_only,
        prefix,
        kv,
    });
    let mut failed = Vec::new();
    for name in selected.iter().copied() {
        let fleet = fleet.clone();
        let check = async move {
            let (s, m, p, kv) = (
                &fleet.servers[..],
                &fleet.model_only,
                &fleet.prefix,
                &fleet.kv,
            );
            match name {
                "openai_client_sees_no_difference" => {
                    api::openai_client_sees_no_difference(s, m).await
                }
                "client_stack_streams_from_vllm" => api::client_stack_streams_from_vllm(s).await,
                "routes_pass_through" => api::routes_pass_through(s, m).await,
                "error_bodies_are_vllm_s" => api::error_bodies_are_vllm_s(s, m).await,
                "ttft_within_5_ms_of_direct" => api::ttft_within_5_ms_of_direct(s, m).await,
                "closed_stream_is_aborted_on_the_server" => {
                    api::closed_stream_is_aborted_on_the_server(s, m).await
                }
                "a_lost_hedge_is_aborted_on_the_server" => {
                    hedge::a_lost_hedge_is_aborted_on_the_server(s).await
                }
                "prefix_affinity_raises_vllm_s_hit_rate" => {
                    affinity::prefix_affinity_raises_vllm_s_hit_rate(s, m, p).await
                }
                "kv_events_route_to_what_vllm_caches" => {
                    precise::kv_events_route_to_what_vllm_caches(s, p, kv).await
                }
                "kv_index_forgets_a_restarted_server" => {
                    precise::kv_index_forgets_a_restarted_server(s, kv).await
                }
                "ttft_and_tpot_are_histograms" => api::ttft_and_tpot_are_histograms(m).await,
                "sigterm_drains_every_stream" => drain::sigterm_drains_every_stream(s).await,
                "a_stopped_server_is_ejected" => fleet::a_stopped_server_is_ejected(s, p).await,
                "a_killed_server_fails_only_its_own_streams" => {
                    fleet::a_killed_server_fails_only_its_own_streams(s, p).await
                }
                "a_restarted_server_gets_traffic_within_5_s" => {
                    fleet::a_restarted_server_gets_traffic_within_5_s(s, p).await
                }
                other => unreachable!("no check {other}"),
            }
        };
        if !report(name, check).await {
            failed.push(name);
        }
    }
    let passed = selected.len() - failed.len();
    println!(
        "\nreal_vllm: {passed} passed; {} failed{}; {:.0} s\n",
        failed.len(),
        match failed.is_empty() {
            true => String::new(),
            false => format!(" ({})", failed.join(", ")),
        },
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        for server in &fleet.servers {
            eprintln!("--- {} log ---\n{}", server.name, server.log_tail());
        }
        ExitCode::FAILURE
    }
}

/// Runs one check in a task of its own (a panic fails it, not the run);
/// prints its line; whether it passed.
async fn report(name: &str, check: impl Future<Output = ()> + Send + 'static) -> bool {
    println!("test real_vllm::{name} ...");
    match tokio::spawn(check).await {
        Ok(()) => {
            println!("test real_vllm::{name} ... ok");
            true
        }
        Err(error) => {
            println!("test real_vllm::{name} ... FAILED: {error}");
            false
        }
    }
}
