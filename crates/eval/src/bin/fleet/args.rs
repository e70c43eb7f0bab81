//! Command-line flags of the fleet job.

use std::fmt;

use clap::error::ErrorKind;
use clap::{CommandFactory as _, Parser, ValueEnum};
use tower_model_balance_eval::flags::{self, List};
use tower_model_balance_eval::workload::DEFAULT_LOAD;

use crate::names::{DEFAULT, NAMES, OVERLOAD, PREFIX};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// 5 resident slots per backend; one backend answers 503 for the middle
    /// third of the run.
    Default,
    /// 16 resident slots; one backend answers 10% of its requests 10× slower.
    SlowTail,
    /// The default fleet without its fault, at 1.0, 1.5 and 3.0 of warm
    /// capacity, 10% of requests `Critical`.
    Overload,
    /// One model, a prefix cache per server, shared-prefix chat traffic.
    Prefix,
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scenario::Default => "default",
            Scenario::SlowTail => "slow-tail",
            Scenario::Overload => "overload",
            Scenario::Prefix => "prefix",
        })
    }
}

/// The main job: the same inference workload, over real HTTP on loopback,
/// through each routing strategy, side by side (crates/eval/docs/fleet.md).
#[derive(Debug, Parser)]
#[command(name = "fleet")]
struct Flags {
    /// Requests per strategy (10..=1000000) [default: 10000; prefix 4000]
    #[arg(long, value_name = "N", value_parser = flags::whole(10usize, 1_000_000))]
    requests: Option<usize>,
    /// Simulated servers (2..=64)
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = flags::whole(2usize, 64))]
    backends: usize,
    /// The workload's seed
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// The fleet and its fault
    #[arg(long, value_enum, default_value_t = Scenario::Default)]
    scenario: Scenario,
    /// Offered load, a fraction of warm capacity (0.01..=4) [default: 0.3;
    /// overload runs 1.0, 1.5 and 3.0; not prefix]
    #[arg(long, value_name = "FRACTION", value_parser = flags::number(0.01, 4.0))]
    load: Option<f64>,
    /// Comma-separated; a name given again runs again, as NAME#2 [default:
    /// round_robin,p2c,consistent_hash,model_aware,model_aware_hedged; in
    /// overload round_robin,p2c,consistent_hash,model_aware,model_aware_admission;
    /// in prefix round_robin,p2c,consistent_hash,chwbl,model_aware]
    #[arg(long, value_name = "NAME,...", value_parser = flags::list(flags::one_of(&NAMES)))]
    strategies: Option<List<&'static str>>,
    /// Servers in explicit model-control mode; model_aware* place models
    #[arg(long)]
    explicit_load: bool,
    /// Inference requests as streamed chat completions (TTFT, TPOT)
    #[arg(long)]
    stream: bool,
    /// One JSON object per strategy instead of the table
    #[arg(long)]
    json: bool,
    /// The model_aware* balancers learn the servers from the etcd at this
    /// client URL (e.g. http://127.0.0.1:2379)
    #[arg(long, value_name = "URL", value_parser = etcd_url)]
    etcd: Option<String>,
    /// The key prefix of the servers' records in etcd [default:
    /// /tower-model-balance/fleet-PID/]
    #[arg(long, value_name = "P", requires = "etcd", value_parser = key_prefix)]
    prefix: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Args {
    pub requests: usize,
    /// `--requests` was given (`prefix` has its own default).
    pub requests_given: bool,
    pub backends: usize,
    pub seed: u64,
    pub scenario: Scenario,
    pub json: bool,
    /// Offered load as a fraction of the fleet's warm capacity.
    pub load: f64,
    /// Servers in explicit model-control mode (404 until a model is loaded
    /// through their repository API); `model_aware` places models itself.
    pub explicit_load: bool,
    /// Which strategies to run, in the order given (the table's order); in
    /// default and slow-tail a name given again runs again (see
    /// [`labels`]).
    pub strategies: Vec<&'static str>,
    /// Inference requests as streamed OpenAI chat completions, timed to
    /// their first token and per token.
    pub stream: bool,
    /// `--etcd`: the `model_aware*` balancers learn the servers from the
    /// etcd at this client URL.
    pub etcd: Option<String>,
    /// `--prefix`: the key prefix of the servers' records there.
    pub prefix: Option<String>,
}

impl Args {
    /// The program's command line; on a bad one, the error and the usage
    /// on stderr and exit 2 (`--help`: the help, exit 0).
    pub fn from_env() -> Self {
        Self::parse_from(std::env::args_os()).unwrap_or_else(|error| error.exit())
    }

    /// The flags of `args` (the program's name first).
    pub fn parse_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let flags = Flags::try_parse_from(args)?;
        let conflict =
            |message: String| Flags::command().error(ErrorKind::ArgumentConflict, message);
        let strategies_given = flags.strategies.is_some();
        let mut parsed = Args {
            requests: flags.requests.unwrap_or(10_000),
            requests_given: flags.requests.is_some(),
            backends: flags.backends,
            seed: flags.seed,
            scenario: flags.scenario,
            json: flags.json,
            load: flags.load.unwrap_or(DEFAULT_LOAD),
            explicit_load: flags.explicit_load,
            strategies: flags.strategies.map_or_else(|| DEFAULT.to_vec(), |l| l.0),
            stream: flags.stream,
            etcd: flags.etcd,
            prefix: flags.prefix,
        };
        if parsed.scenario == Scenario::Overload {
            if parsed.stream {
                return Err(conflict(
                    "--stream does not apply to overload (default and slow-tail only)".into(),
                ));
            }
            if flags.load.is_some() {
                return Err(conflict(
                    "--load does not apply to overload: it runs 1.0, 1.5 and 3.0 of warm capacity"
                        .into(),
                ));
            }
            if !strategies_given {
                parsed.strategies = OVERLOAD.to_vec();
            }
        }
        let repeated = |s: &[&str]| s.iter().enumerate().any(|(i, n)| s[..i].contains(n));
        if matches!(parsed.scenario, Scenario::Overload | Scenario::Prefix)
            && repeated(&parsed.strategies)
        {
            return Err(conflict(
                "a strategy given twice runs twice (an A/A pair) in default and slow-tail only"
                    .into(),
            ));
        }
        if parsed.scenario == Scenario::Prefix {
            for (flag, given) in [
                ("--load", flags.load.is_some()),
                ("--stream", flags.stream),
                ("--explicit-load", flags.explicit_load),
            ] {
                if given {
                    return Err(conflict(format!(
                        "{flag} does not apply to prefix (its requests are streamed, its rate set by its prefill capacity)"
                    )));
                }
            }
            if !strategies_given {
                parsed.strategies = PREFIX.to_vec();
            }
        }
        Ok(parsed)
    }
}

/// `--etcd`'s value: an etcd client URL, `http://host:port`.
fn etcd_url(text: &str) -> Result<String, String> {
    match tower_model_balance::endpoint::Origin::parse(text) {
        Ok(url)
            if url.scheme() == &http::uri::Scheme::HTTP && url.authority().port_u16().is_some() =>
        {
            Ok(url.to_string())
        }
        _ => Err(format!(
            "--etcd takes an etcd client URL, http://host:port, got `{text}`"
        )),
    }
}

/// `--prefix`'s value: a key prefix, 1 byte or more, no control characters.
fn key_prefix(text: &str) -> Result<String, String> {
    if text.is_empty() || text.chars().any(char::is_control) {
        return Err(format!(
            "--prefix takes a key prefix (1 byte or more, no control characters), got `{}`",
            text.escape_debug()
        ));
    }
    Ok(text.to_owned())
}

/// Each run's row label: the strategy's name, and `name#k` for its k-th
/// run when given more than once.
pub fn labels(strategies: &[&'static str]) -> Vec<(&'static str, String)> {
    strategies
        .iter()
        .enumerate()
        .map(
            |(i, &name)| match strategies[..i].iter().filter(|&&n| n == name).count() {
                0 => (name, name.to_owned()),
                k => (name, format!("{name}#{}", k + 1)),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::parse_from(std::iter::once("fleet").chain(args.iter().copied()))
    }

    #[test]
    fn etcd_and_its_prefix() {
        let args = parse(&[]).unwrap();
        assert_eq!((args.etcd, args.prefix), (None, None));
        let args = parse(&["--etcd", "http://127.0.0.1:2379"]).unwrap();
        assert_eq!(args.etcd.as_deref(), Some("http://127.0.0.1:2379"));
        let args = parse(&["--etcd=http://127.0.0.1:2379", "--prefix", "/fleet/"]).unwrap();
        assert_eq!(args.prefix.as_deref(), Some("/fleet/"));
        for (bad, says) in [
            (
                &["--prefix", "/fleet/"][..],
                "required arguments were not provided",
            ),
            (&["--etcd", "127.0.0.1:2379"], "http://host:port"),
            (&["--etcd", "http://127.0.0.1"], "http://host:port"),
            (&["--etcd", "https://127.0.0.1:2379"], "http://host:port"),
            (&["--etcd"], "a value is required for '--etcd <URL>'"),
            (
                &["--etcd", "http://a:1", "--etcd", "http://b:1"],
                "cannot be used multiple times",
            ),
            (&["--etcd", "http://a:1", "--prefix", ""], "key prefix"),
        ] {
            match parse(bad) {
                Err(error) => {
                    let message = error.to_string();
                    assert!(
                        message.contains(says),
                        "{bad:?}: `{message}` lacks `{says}`"
                    )
                }
                other => panic!("{bad:?} should fail, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_strategy_given_again_runs_again_under_its_own_label() {
        let args = parse(&["--strategies", "model_aware,model_aware_hedged,model_aware"]).unwrap();
        let labels: Vec<_> = labels(&args.strategies)
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        assert_eq!(
            labels,
            ["model_aware", "model_aware_hedged", "model_aware#2"]
        );
        for scenario in ["overload", "prefix"] {
            let bad = parse(&["--scenario", scenario, "--strategies", "p2c,p2c"]);
            match bad {
                Err(error) => {
                    assert!(error.to_string().contains("default and slow-tail only"))
                }
                other => panic!("{scenario}: a repeat should fail, got {other:?}"),
            }
        }
    }
}
