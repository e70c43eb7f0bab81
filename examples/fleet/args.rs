//! Command-line flags of the fleet example.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// 5 resident slots per backend; one backend answers 503 for the middle
    /// third of the run.
    Default,
    /// 16 resident slots; one backend answers 10% of its requests 10× slower.
    SlowTail,
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scenario::Default => "default",
            Scenario::SlowTail => "slow-tail",
        })
    }
}

#[derive(Debug, Clone)]
pub struct Args {
    pub requests: usize,
    pub backends: usize,
    pub seed: u64,
    pub scenario: Scenario,
    pub json: bool,
}

pub const USAGE: &str =
    "usage: fleet [--requests N (>= 10, default 10000)] [--backends N (2..=64, default 8)] \
[--seed N (default 1)] [--scenario default|slow-tail] [--json]";

impl Args {
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut parsed = Args {
            requests: 10_000,
            backends: 8,
            seed: 1,
            scenario: Scenario::Default,
            json: false,
        };
        while let Some(flag) = args.next() {
            let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
            match flag.as_str() {
                "--requests" => parsed.requests = number(&value("--requests")?, "--requests")?,
                "--backends" => parsed.backends = number(&value("--backends")?, "--backends")?,
                "--seed" => parsed.seed = number(&value("--seed")?, "--seed")?,
                "--scenario" => {
                    parsed.scenario = match value("--scenario")?.as_str() {
                        "default" => Scenario::Default,
                        "slow-tail" => Scenario::SlowTail,
                        other => return Err(format!("unknown scenario `{other}`")),
                    }
                }
                "--json" => parsed.json = true,
                "-h" | "--help" => return Err(String::new()),
                other => return Err(format!("unknown flag `{other}`")),
            }
        }
        if parsed.requests < 10 {
            return Err("--requests must be at least 10".into());
        }
        if !(2..=64).contains(&parsed.backends) {
            return Err("--backends must be in 2..=64".into());
        }
        Ok(parsed)
    }
}

fn number<T: std::str::FromStr>(text: &str, flag: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{flag} takes a non-negative integer, got `{text}`"))
}
