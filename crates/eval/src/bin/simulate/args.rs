//! Command-line flags of the simulation.

use std::path::PathBuf;

use crate::config::{Config, NAMES};
use crate::scenarios::Scenario;

pub const USAGE: &str = "\
usage: cargo run --release --bin simulate -- [flags]

Runs each scenario (default: both, in turn), the flags on top of its preset:
  default    4 serving slots, no batching, utilization 0.5
  llm-batch  LLM servers that batch: 32 serving slots, inference scale 10,
             batch slowdown 0.03, utilization 0.75 (of the capacity at a
             full batch), load factor 1.15, owner load 0.75

  --scenario NAME     run only this scenario (default or llm-batch)
  --backends N        backends (10..=20000, default 1000)
  --models N          models (1..=1000000, default 10000)
  --requests N        requests per strategy (1000..=100000000, default 1000000)
  --seed N            seed (default 1)
  --zipf S            Zipf exponent of popularity (0..=3, default 1.1)
  --utilization U     arrivals as a share of warm capacity, at a full batch
                      (0.01..=0.95, default 0.5)
  --updates U         share of update requests (0..=1, default 0.1)
  --serving-slots N   requests a backend serves at once (1..=256, default 4)
  --inference-scale X inference times × X, alone on a backend (0.1..=100,
                      default 1: 100 ms + 10 ms per GB)
  --batch-slowdown S  each request in service slows the others by S × their
                      time alone (0..=1, default 0: no batching)
  --model-slots N     models a backend holds resident (1..=1024, default 16)
  --vnodes N          ring points per backend (1..=1000, default 150)
  --owners K          most owners per model, model_aware (1..=1024, default 1024)
  --min-owners K      fewest owners per model, model_aware (1..=K, default 1)
  --load-factor C     bounded-load factor c (1..=100, default 1.25)
  --owner-load L      model_aware: owners sized for a model's traffic to put
                      L × the mean load on each (0.01..=C, default C)
  --staging-step S    staged ring change: share of points per step (0<S<=1, default 0.01)
  --staging-cooldown T  seconds between staging steps (0..=3600, default 5)
  --strategies LIST   comma-separated (default all: round_robin,random,p2c,
                      consistent_hash,bounded_load,model_aware)
  --no-churn          skip the membership changes
  --sweep             sweep vnodes, k, c and the staging step instead
  --json              one JSON object per line instead of the table, each
                      with its \"scenario\"
  --svg PATH          also write an SVG chart of the first scenario to PATH
  --help              this text";

/// Why parsing stopped: a help request, or an error to report.
#[derive(Debug)]
pub enum Stop {
    Help,
    Error(String),
}

impl Config {
    /// One config per scenario to run, in order: each scenario's preset
    /// with the flags on top (`--scenario` picks one).
    pub fn parse(args: impl Iterator<Item = String>) -> Result<Vec<Self>, Stop> {
        // `--flag value` and `--flag=value` alike.
        let args: Vec<String> = args
            .flat_map(|arg| match arg.split_once('=') {
                Some((flag, value)) if arg.starts_with("--") => {
                    vec![flag.to_owned(), value.to_owned()]
                }
                _ => vec![arg],
            })
            .collect();
        let (_, only) = Config::default().with_flags(&args)?;
        let scenarios = match only {
            Some(scenario) => vec![scenario],
            None => Scenario::ALL.to_vec(),
        };
        scenarios
            .into_iter()
            .map(|s| Config::preset(s).with_flags(&args).map(|(c, _)| c))
            .collect()
    }

    /// This config with `args` applied, and the scenario `--scenario`
    /// names, if given.
    fn with_flags(mut self, args: &[String]) -> Result<(Self, Option<Scenario>), Stop> {
        let c = &mut self;
        let mut only = None;
        let mut args = args.iter().cloned();
        let mut seen: Vec<String> = Vec::new();
        while let Some(flag) = args.next() {
            if seen.contains(&flag) {
                return Err(Stop::Error(format!("`{flag}` given twice")));
            }
            seen.push(flag.clone());
            let mut value = || {
                args.next()
                    .ok_or_else(|| Stop::Error(format!("`{flag}` needs a value")))
            };
            match flag.as_str() {
                "--help" | "-h" => return Err(Stop::Help),
                "--scenario" => only = Some(scenario(&value()?)?),
                "--backends" => c.backends = int(&flag, &value()?, 10, 20_000)?,
                "--models" => c.models = int(&flag, &value()?, 1, 1_000_000)?,
                "--requests" => c.requests = int(&flag, &value()?, 1000, 100_000_000)?,
                "--seed" => c.seed = int(&flag, &value()?, 0, u64::MAX)?,
                "--zipf" => c.zipf = float(&flag, &value()?, 0.0, 3.0)?,
                "--utilization" => c.utilization = float(&flag, &value()?, 0.01, 0.95)?,
                "--updates" => c.update_share = float(&flag, &value()?, 0.0, 1.0)?,
                "--serving-slots" => c.serving_slots = int(&flag, &value()?, 1, 256)?,
                "--inference-scale" => c.inference_scale = float(&flag, &value()?, 0.1, 100.0)?,
                "--batch-slowdown" => c.batch_slowdown = float(&flag, &value()?, 0.0, 1.0)?,
                "--model-slots" => c.model_slots = int(&flag, &value()?, 1, 1024)?,
                "--vnodes" => c.vnodes = int(&flag, &value()?, 1, 1000)?,
                "--owners" => c.owners = int(&flag, &value()?, 1, 1024)?,
                "--min-owners" => c.min_owners = int(&flag, &value()?, 1, 1024)?,
                "--load-factor" => c.load_factor = float(&flag, &value()?, 1.0, 100.0)?,
                "--owner-load" => c.owner_load = Some(float(&flag, &value()?, 0.01, 100.0)?),
                "--staging-step" => {
                    c.staging_step = float(&flag, &value()?, 1e-6, 1.0)?;
                }
                "--staging-cooldown" => c.staging_cooldown = float(&flag, &value()?, 0.0, 3600.0)?,
                "--strategies" => c.strategies = strategies(&value()?)?,
                "--no-churn" => c.churn = false,
                "--sweep" => c.sweep = true,
                "--json" => c.json = true,
                "--svg" => c.svg = Some(PathBuf::from(value()?)),
                other => return Err(Stop::Error(format!("unknown flag `{other}`"))),
            }
        }
        if c.min_owners > c.owners {
            return Err(Stop::Error(format!(
                "`--min-owners` is over `--owners` ({})",
                c.owners
            )));
        }
        if c.owner_load.is_some_and(|load| load > c.load_factor) {
            return Err(Stop::Error(format!(
                "`--owner-load` is over `--load-factor` ({})",
                c.load_factor
            )));
        }
        // The largest membership change adds 10% of the backends.
        let points = (c.backends + c.backends.div_ceil(10)) as u64 * u64::from(c.vnodes);
        if points > tower_model_balance::ring::MAX_POINTS as u64 {
            return Err(Stop::Error(format!(
                "`--backends` × 1.1 × `--vnodes` is {points} ring points, over the ring's {}",
                tower_model_balance::ring::MAX_POINTS
            )));
        }
        Ok((self, only))
    }
}

fn scenario(name: &str) -> Result<Scenario, Stop> {
    Scenario::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
        Stop::Error(format!(
            "unknown scenario `{name}` (one of {})",
            names.join(", ")
        ))
    })
}

fn int<T>(flag: &str, text: &str, min: T, max: T) -> Result<T, Stop>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    match text.parse::<T>() {
        Ok(v) if v >= min && v <= max => Ok(v),
        _ => Err(Stop::Error(format!(
            "`{flag}` takes a whole number in {min}..={max}, not `{text}`"
        ))),
    }
}

fn float(flag: &str, text: &str, min: f64, max: f64) -> Result<f64, Stop> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= min && v <= max => Ok(v),
        _ => Err(Stop::Error(format!(
            "`{flag}` takes a number in {min}..={max}, not `{text}`"
        ))),
    }
}

fn strategies(list: &str) -> Result<Vec<&'static str>, Stop> {
    let mut chosen = Vec::new();
    for name in list.split(',').map(str::trim) {
        let Some(known) = NAMES.iter().find(|n| **n == name) else {
            return Err(Stop::Error(format!(
                "unknown strategy `{name}` (one of {})",
                NAMES.join(", ")
            )));
        };
        if chosen.contains(known) {
            return Err(Stop::Error(format!("strategy `{name}` given twice")));
        }
        chosen.push(*known);
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Vec<Config>, Stop> {
        Config::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn bad_flags_are_errors_not_panics() {
        for bad in [
            &["--backends"][..],
            &["--backends", "x"],
            &["--backends", "5"],
            &["--zipf", "NaN"],
            &["--staging-step", "0"],
            &["--strategies", "nope"],
            &["--strategies", "p2c,p2c"],
            &["--json", "--json"],
            &["--frobnicate"],
            &["--scenario", "nope"],
            &["--batch-slowdown", "2"],
            &["--backends", "20000", "--vnodes", "1000"],
        ] {
            assert!(matches!(parse(bad), Err(Stop::Error(_))), "{bad:?}");
        }
        assert!(matches!(parse(&["--help"]), Err(Stop::Help)));
        let c = &parse(&["--backends=50", "--strategies", "p2c,model_aware", "--json"]).unwrap()[0];
        assert_eq!((c.backends, c.strategies.len(), c.json), (50, 2, true));
    }

    #[test]
    fn each_scenario_takes_its_preset_with_the_flags_on_top() {
        let both = parse(&["--seed", "3"]).unwrap();
        let names: Vec<&str> = both.iter().map(|c| c.scenario.name()).collect();
        assert_eq!(names, ["default", "llm-batch"]);
        assert_eq!((both[0].serving_slots, both[1].serving_slots), (4, 32));
        assert!(both.iter().all(|c| c.seed == 3));
        let one = parse(&["--scenario", "llm-batch", "--serving-slots", "64"]).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(
            (one[0].scenario, one[0].serving_slots),
            (Scenario::LlmBatch, 64)
        );
        assert_eq!(one[0].batch_slowdown, 0.03);
        assert_eq!((one[0].load_factor, one[0].owner_load), (1.15, Some(0.75)));
        assert_eq!((both[0].load_factor, both[0].owner_load), (1.25, None));
        assert!(matches!(
            parse(&["--scenario", "default", "--owner-load", "1.5"]),
            Err(Stop::Error(_))
        ));
        assert!(matches!(
            parse(&["--owners", "2", "--min-owners", "3"]),
            Err(Stop::Error(_))
        ));
    }
}
