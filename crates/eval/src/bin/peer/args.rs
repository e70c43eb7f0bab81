//! The peer comparison's flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory as _, Parser};
use tower_model_balance_eval::flags::{self, List};

use crate::load::Workload;
use crate::router::VLLM_POLICIES;

/// The peer comparison: this crate's gateway beside vLLM Router in front
/// of the same simulated servers, with a bare proxy as the floor
/// (crates/eval/docs/peer-comparison.md). Run it with `bash scripts/peer-compare
/// [FLAGS]` (`cargo run --release --bin peer -- FLAGS`, with vLLM Router
/// installed). Each flag may be given once. The programs and --logs are
/// checked before any run: a bad one exits 2.
#[derive(Debug, Parser)]
#[command(name = "peer")]
struct Flags {
    /// Offered loads, requests per second, comma-separated (each
    /// 1..=100000; default 100,200,300)
    #[arg(long, value_name = "LIST", value_parser = flags::list(flags::number(1.0, 100_000.0)))]
    rates: Option<List<f64>>,
    /// How long each run sends, seconds (0.5..=600, default 10)
    #[arg(long, value_name = "SECS", value_parser = flags::seconds(0.5, 600.0))]
    duration: Option<Duration>,
    /// vLLM Router's policies, comma-separated, of cache_aware,
    /// power_of_two, round_robin, consistent_hash, random (default: all
    /// five)
    #[arg(long, value_name = "LIST", value_parser = flags::list(flags::one_of(&VLLM_POLICIES)))]
    policies: Option<List<&'static str>>,
    /// Skip the search for each router's highest sustained rate
    #[arg(long)]
    no_max_rate: bool,
    /// How long each step of that search sends, seconds (0.5..=600,
    /// default 5)
    #[arg(long, value_name = "S", value_parser = flags::seconds(0.5, 600.0))]
    search_duration: Option<Duration>,
    /// plain (default: Zipf(1.1) over 32 models, a prompt of its own per
    /// request) or prefix (one model, prompts sharing long prefixes, chat
    /// sessions; the servers with a prefix cache, the gateway with
    /// --prefix-bytes 100 and --session-header x-session-id; the hit%
    /// column)
    #[arg(long, value_name = "W", value_parser = workload)]
    workload: Option<Workload>,
    /// Simulated servers per run (1..=64)
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = flags::whole(1usize, 64))]
    backends: usize,
    /// The workload's seed
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// The gateway's binary (default: the one cargo builds, in this one's
    /// profile folder: target/release/gateway)
    #[arg(long, value_name = "PATH")]
    gateway: Option<PathBuf>,
    /// The bare proxy's binary (default: the one cargo builds there:
    /// target/release/bare-proxy)
    #[arg(long, value_name = "PATH")]
    bare_proxy: Option<PathBuf>,
    /// vLLM Router's launcher
    #[arg(
        long,
        value_name = "PATH",
        default_value = "target/venv-vllm-router/bin/vllm-router"
    )]
    vllm_router: PathBuf,
    /// Where each router's output goes
    #[arg(long, value_name = "DIR", default_value = "target/peer-logs")]
    logs: PathBuf,
    /// A short check: 100 req/s for 2 s, direct, bare, bare oracle (plain
    /// workload), the gateway and vLLM Router's cache_aware, no search;
    /// fails unless each answered and had its CPU time read. --rates,
    /// --duration and --policies given with it replace those values
    #[arg(long)]
    smoke: bool,
    /// scripts/peer-compare's flag, not this program's
    #[arg(long, hide = true)]
    dev: bool,
}

/// `--workload`'s value.
fn workload(text: &str) -> Result<Workload, String> {
    match text {
        "plain" => Ok(Workload::Plain),
        "prefix" => Ok(Workload::Prefix),
        other => Err(format!("`{other}` is not plain or prefix")),
    }
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub workload: Workload,
    pub rates: Vec<f64>,
    pub duration: Duration,
    pub policies: Vec<String>,
    pub max_rate: bool,
    pub search_duration: Duration,
    pub backends: usize,
    pub seed: u64,
    pub gateway: Option<PathBuf>,
    pub bare_proxy: Option<PathBuf>,
    pub vllm_router: PathBuf,
    pub logs: PathBuf,
    pub smoke: bool,
}

impl Args {
    /// The flags of `args` (the program's name first).
    pub fn parse_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let flags = Flags::try_parse_from(args)?;
        let conflict = |message: &str| Flags::command().error(ErrorKind::ArgumentConflict, message);
        if flags.dev {
            return Err(conflict(
                "--dev is scripts/peer-compare's flag (the debug builds), not this program's",
            ));
        }
        let (rates_given, policies_given) = (flags.rates.is_some(), flags.policies.is_some());
        let mut parsed = Args {
            workload: flags.workload.unwrap_or(Workload::Plain),
            rates: flags
                .rates
                .map_or_else(|| vec![100.0, 200.0, 300.0], |l| l.0),
            duration: flags.duration.unwrap_or(Duration::from_secs(10)),
            policies: flags
                .policies
                .map_or(VLLM_POLICIES.to_vec(), |l| l.0)
                .into_iter()
                .map(str::to_owned)
                .collect(),
            max_rate: !flags.no_max_rate,
            search_duration: flags.search_duration.unwrap_or(Duration::from_secs(5)),
            backends: flags.backends,
            seed: flags.seed,
            gateway: flags.gateway,
            bare_proxy: flags.bare_proxy,
            vllm_router: flags.vllm_router,
            logs: flags.logs,
            smoke: flags.smoke,
        };
        if parsed.smoke {
            // The smoke run's own values, where no flag gave one: 100 req/s
            // for 2 s, vLLM Router's cache_aware, no search.
            if !rates_given {
                parsed.rates = vec![100.0];
            }
            if flags.duration.is_none() {
                parsed.duration = Duration::from_secs(2);
            }
            if !policies_given {
                parsed.policies = vec!["cache_aware".to_owned()];
            }
            if flags.search_duration.is_some() {
                return Err(conflict(
                    "--search-duration with --smoke: the smoke run has no search",
                ));
            }
            parsed.max_rate = false;
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::parse_from(std::iter::once("peer").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_and_flags() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.rates, [100.0, 200.0, 300.0]);
        assert_eq!(args.policies.len(), 5);
        assert!(args.max_rate && !args.smoke);
        let args = parse(&["--rates", "50, 75", "--policies", "random", "--no-max-rate"]).unwrap();
        assert_eq!(
            (args.rates, args.policies),
            (vec![50.0, 75.0], vec!["random".to_owned()])
        );
        let smoke = parse(&["--smoke"]).unwrap();
        assert_eq!((smoke.rates, smoke.max_rate), (vec![100.0], false));
        assert_eq!(smoke.duration, Duration::from_secs(2));
        assert_eq!(smoke.policies, ["cache_aware"]);
        assert_eq!(smoke.workload, Workload::Plain);
        let prefix = parse(&["--smoke", "--workload", "prefix"]).unwrap();
        assert_eq!(
            (prefix.workload, prefix.rates),
            (Workload::Prefix, vec![100.0])
        );
    }

    #[test]
    fn smoke_keeps_the_flags_given_with_it() {
        let args = parse(&[
            "--rates",
            "50",
            "--smoke",
            "--duration",
            "1",
            "--policies",
            "random",
            "--backends",
            "4",
        ])
        .unwrap();
        assert_eq!(
            (args.rates, args.duration),
            (vec![50.0], Duration::from_secs(1))
        );
        assert_eq!(
            (args.policies, args.backends),
            (vec!["random".to_owned()], 4)
        );
        assert!(!args.max_rate);
        // No search in a smoke run: a flag for it is an error, not ignored.
        match parse(&["--smoke", "--search-duration", "2"]) {
            Err(error) => assert!(error.to_string().contains("no search"), "{error}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_flag_given_twice_is_an_error() {
        for args in [
            &["--rates", "100", "--rates", "200"][..],
            &["--smoke", "--smoke"],
            &["--no-max-rate", "--seed", "2", "--no-max-rate"],
            &["--logs", "a", "--logs", "b"],
        ] {
            match parse(args) {
                Err(error) => assert!(
                    error.to_string().contains("cannot be used multiple times"),
                    "{error}"
                ),
                other => panic!("{args:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn bad_flags_say_why() {
        for (args, says) in [
            (&["--rates", "0"][..], "--rates"),
            (&["--rates", "x,100"], "--rates"),
            (&["--duration", "0.1"], "0.5..=600"),
            (&["--policies", "kv_aware"], "not one of"),
            (&["--backends", "65"], "1..=64"),
            (&["--workload", "zipf"], "not plain or prefix"),
            (&["--seed"], "a value is required"),
            (&["--bogus"], "unexpected argument"),
            (&["--dev"], "scripts/peer-compare's flag"),
        ] {
            match parse(args) {
                Err(error) => assert!(error.to_string().contains(says), "{error}"),
                other => panic!("{args:?}: {other:?}"),
            }
        }
        assert!(
            matches!(parse(&["-h"]), Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp)
        );
    }
}
