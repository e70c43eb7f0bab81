//! Command-line flags of the fleet job.

use std::fmt;

use tower_model_balance_eval::workload::DEFAULT_LOAD;

use crate::names::{DEFAULT, NAMES, OVERLOAD, PREFIX};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

pub const USAGE: &str = "usage: cargo run --release --bin fleet -- \
[--requests N (10..=1000000, default 10000; prefix 4000)] [--backends N (2..=64, default 8)] \
[--seed N (default 1)] [--scenario default|slow-tail|overload|prefix] [--load FRACTION (0.01..=4, default 0.3; overload runs 1.0, 1.5 and 3.0; not prefix)] \
[--strategies NAME,... (a name given again runs again, as NAME#2; default: round_robin,p2c,consistent_hash,model_aware,model_aware_hedged; \
in overload round_robin,p2c,consistent_hash,model_aware,model_aware_admission; \
in prefix round_robin,p2c,consistent_hash,chwbl,model_aware)] [--explicit-load] [--stream] [--json] \
[--etcd URL (the model_aware* balancers learn the servers from etcd, e.g. http://127.0.0.1:2379) [--prefix P (default /tower-model-balance/fleet-PID/)]]";

/// Why parsing stopped: a help request, or an error to report.
#[derive(Debug)]
pub enum Stop {
    Help,
    Error(String),
}

impl Args {
    pub fn parse(args: impl Iterator<Item = String>) -> Result<Self, Stop> {
        let mut parsed = Args {
            requests: 10_000,
            requests_given: false,
            backends: 8,
            seed: 1,
            scenario: Scenario::Default,
            json: false,
            load: DEFAULT_LOAD,
            explicit_load: false,
            strategies: DEFAULT.to_vec(),
            stream: false,
            etcd: None,
            prefix: None,
        };
        let mut strategies_given = false;
        // `--flag value` and `--flag=value` alike; a switch takes no value.
        let args: Vec<String> = args.collect();
        for arg in &args {
            if let Some((flag @ ("--json" | "--explicit-load" | "--stream"), _)) =
                arg.split_once('=')
            {
                return Err(Stop::Error(format!("`{flag}` takes no value, got `{arg}`")));
            }
        }
        let mut args = args.into_iter().flat_map(|arg| match arg.split_once('=') {
            Some((flag, value)) if arg.starts_with("--") => vec![flag.to_owned(), value.to_owned()],
            _ => vec![arg],
        });
        let mut seen: Vec<String> = Vec::new();
        while let Some(flag) = args.next() {
            if flag.starts_with("--") && flag != "--help" {
                if seen.contains(&flag) {
                    return Err(Stop::Error(format!("`{flag}` given twice")));
                }
                seen.push(flag.clone());
            }
            let mut value = |name: &str| {
                args.next()
                    .ok_or_else(|| Stop::Error(format!("{name} needs a value")))
            };
            match flag.as_str() {
                "--requests" => {
                    parsed.requests = number(&value("--requests")?, "--requests")?;
                    parsed.requests_given = true;
                }
                "--backends" => parsed.backends = number(&value("--backends")?, "--backends")?,
                "--seed" => parsed.seed = number(&value("--seed")?, "--seed")?,
                "--scenario" => {
                    parsed.scenario = match value("--scenario")?.as_str() {
                        "default" => Scenario::Default,
                        "slow-tail" => Scenario::SlowTail,
                        "overload" => Scenario::Overload,
                        "prefix" => Scenario::Prefix,
                        other => return Err(Stop::Error(format!("unknown scenario `{other}`"))),
                    }
                }
                "--strategies" => {
                    parsed.strategies = strategies(&value("--strategies")?)?;
                    strategies_given = true;
                }
                "--json" => parsed.json = true,
                "--explicit-load" => parsed.explicit_load = true,
                "--stream" => parsed.stream = true,
                "--load" => {
                    let text = value("--load")?;
                    parsed.load = match text.parse::<f64>() {
                        Ok(load) if (0.01..=4.0).contains(&load) => load,
                        _ => {
                            return Err(Stop::Error(format!(
                                "--load takes a fraction of warm capacity in 0.01..=4, got `{text}`"
                            )))
                        }
                    };
                }
                "--etcd" => {
                    let text = value("--etcd")?;
                    match tower_model_balance::endpoint::Origin::parse(&text) {
                        Ok(url)
                            if url.scheme() == &http::uri::Scheme::HTTP
                                && url.authority().port_u16().is_some() =>
                        {
                            parsed.etcd = Some(url.to_string());
                        }
                        _ => {
                            return Err(Stop::Error(format!(
                                "--etcd takes an etcd client URL, http://host:port, got `{text}`"
                            )))
                        }
                    }
                }
                "--prefix" => {
                    let text = value("--prefix")?;
                    if text.is_empty() || text.chars().any(char::is_control) {
                        return Err(Stop::Error(format!(
                            "--prefix takes a key prefix (1 byte or more, no control characters), got `{}`",
                            text.escape_debug()
                        )));
                    }
                    parsed.prefix = Some(text);
                }
                "-h" | "--help" => return Err(Stop::Help),
                other => return Err(Stop::Error(format!("unknown argument `{other}`"))),
            }
        }
        if parsed.prefix.is_some() && parsed.etcd.is_none() {
            return Err(Stop::Error(
                "--prefix goes with --etcd (the key prefix of the servers' records)".into(),
            ));
        }
        if !(10..=1_000_000).contains(&parsed.requests) {
            return Err(Stop::Error("--requests must be in 10..=1000000".into()));
        }
        if !(2..=64).contains(&parsed.backends) {
            return Err(Stop::Error("--backends must be in 2..=64".into()));
        }
        if parsed.scenario == Scenario::Overload {
            if parsed.stream {
                return Err(Stop::Error(
                    "--stream does not apply to overload (default and slow-tail only)".into(),
                ));
            }
            if seen.iter().any(|f| f == "--load") {
                return Err(Stop::Error(
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
            return Err(Stop::Error(
                "a strategy given twice runs twice (an A/A pair) in default and slow-tail only"
                    .into(),
            ));
        }
        if parsed.scenario == Scenario::Prefix {
            for flag in ["--load", "--stream", "--explicit-load"] {
                if seen.iter().any(|f| f == flag) {
                    return Err(Stop::Error(format!(
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

/// A comma-separated list of known strategy names, each at most once.
fn strategies(list: &str) -> Result<Vec<&'static str>, Stop> {
    let mut chosen = Vec::new();
    for name in list.split(',') {
        if name.is_empty() {
            return Err(Stop::Error(format!(
                "--strategies takes names separated by commas, got `{list}`"
            )));
        }
        let Some(known) = NAMES.iter().find(|n| **n == name) else {
            return Err(Stop::Error(format!(
                "unknown strategy `{name}` (known: {})",
                NAMES.join(", ")
            )));
        };
        // A strategy given again runs again (an A/A pair: the run's own
        // noise beside the difference between strategies).
        chosen.push(*known);
    }
    Ok(chosen)
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

fn number<T: std::str::FromStr>(text: &str, flag: &str) -> Result<T, Stop> {
    text.parse().map_err(|_| {
        let bits = std::mem::size_of::<T>() * 8;
        Stop::Error(format!(
            "{flag} takes a non-negative integer below 2^{bits}, got `{text}`"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, Stop> {
        Args::parse(args.iter().map(|s| s.to_string()))
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
            (&["--prefix", "/fleet/"][..], "--prefix goes with --etcd"),
            (&["--etcd", "127.0.0.1:2379"], "http://host:port"),
            (&["--etcd", "http://127.0.0.1"], "http://host:port"),
            (&["--etcd", "https://127.0.0.1:2379"], "http://host:port"),
            (&["--etcd"], "--etcd needs a value"),
            (
                &["--etcd", "http://a:1", "--etcd", "http://b:1"],
                "given twice",
            ),
            (&["--etcd", "http://a:1", "--prefix", ""], "key prefix"),
        ] {
            match parse(bad) {
                Err(Stop::Error(message)) => {
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
                Err(Stop::Error(message)) => {
                    assert!(message.contains("default and slow-tail only"))
                }
                other => panic!("{scenario}: a repeat should fail, got {other:?}"),
            }
        }
    }
}
