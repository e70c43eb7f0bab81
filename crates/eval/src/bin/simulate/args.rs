//! Command-line flags of the simulation: each applies on top of each
//! scenario's preset (`Config::preset`).

use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::{CommandFactory as _, Parser};
use tower_model_balance_eval::flags::{self, List};

use crate::config::{Config, NAMES};
use crate::scenarios::Scenario;

/// A deterministic simulation of a large inference fleet in virtual time,
/// comparing routing strategies (crates/eval/docs/simulation.md). Runs each scenario
/// (default: both, in turn), the flags on top of its preset:
///
///   default    4 serving slots, no batching, utilization 0.5
///
///   llm-batch  LLM servers that batch: 32 serving slots, inference scale 10,
///              batch slowdown 0.03, utilization 0.75 (of the capacity at a
///              full batch), load factor 1.15, owner load 0.75
#[derive(Debug, Parser)]
#[command(name = "simulate")]
struct Flags {
    /// Run only this scenario (default or llm-batch)
    #[arg(long, value_name = "NAME", value_parser = scenario)]
    scenario: Option<Scenario>,
    /// Backends (10..=20000, default 1000)
    #[arg(long, value_name = "N", value_parser = flags::whole(10usize, 20_000))]
    backends: Option<usize>,
    /// Models (1..=1000000, default 10000)
    #[arg(long, value_name = "N", value_parser = flags::whole(1usize, 1_000_000))]
    models: Option<usize>,
    /// Requests per strategy (1000..=100000000, default 1000000)
    #[arg(long, value_name = "N", value_parser = flags::whole(1000usize, 100_000_000))]
    requests: Option<usize>,
    /// Seed (default 1)
    #[arg(long, value_name = "N", value_parser = flags::whole(0u64, u64::MAX))]
    seed: Option<u64>,
    /// Zipf exponent of popularity (0..=3, default 1.1)
    #[arg(long, value_name = "S", value_parser = flags::number(0.0, 3.0))]
    zipf: Option<f64>,
    /// Arrivals as a share of warm capacity, at a full batch (0.01..=0.95,
    /// default 0.5)
    #[arg(long, value_name = "U", value_parser = flags::number(0.01, 0.95))]
    utilization: Option<f64>,
    /// Share of update requests (0..=1, default 0.1)
    #[arg(long, value_name = "U", value_parser = flags::number(0.0, 1.0))]
    updates: Option<f64>,
    /// Requests a backend serves at once (1..=256, default 4)
    #[arg(long, value_name = "N", value_parser = flags::whole(1usize, 256))]
    serving_slots: Option<usize>,
    /// Inference times × X, alone on a backend (0.1..=100, default 1:
    /// 100 ms + 10 ms per GB)
    #[arg(long, value_name = "X", value_parser = flags::number(0.1, 100.0))]
    inference_scale: Option<f64>,
    /// Each request in service slows the others by S × their time alone
    /// (0..=1, default 0: no batching)
    #[arg(long, value_name = "S", value_parser = flags::number(0.0, 1.0))]
    batch_slowdown: Option<f64>,
    /// Models a backend holds resident (1..=1024, default 16)
    #[arg(long, value_name = "N", value_parser = flags::whole(1usize, 1024))]
    model_slots: Option<usize>,
    /// Ring points per backend (1..=1000, default 150)
    #[arg(long, value_name = "N", value_parser = flags::whole(1u32, 1000))]
    vnodes: Option<u32>,
    /// Most owners per model, model_aware (1..=1024, default 1024)
    #[arg(long, value_name = "K", value_parser = flags::whole(1usize, 1024))]
    owners: Option<usize>,
    /// Fewest owners per model, model_aware (1..=K, default 1)
    #[arg(long, value_name = "K", value_parser = flags::whole(1usize, 1024))]
    min_owners: Option<usize>,
    /// Bounded-load factor c (1..=100, default 1.25)
    #[arg(long, value_name = "C", value_parser = flags::number(1.0, 100.0))]
    load_factor: Option<f64>,
    /// model_aware: owners sized for a model's traffic to put L × the mean
    /// load on each (0.01..=C, default C)
    #[arg(long, value_name = "L", value_parser = flags::number(0.01, 100.0))]
    owner_load: Option<f64>,
    /// Staged ring change: share of points per step (0<S<=1, default 0.01)
    #[arg(long, value_name = "S", value_parser = flags::number(1e-6, 1.0))]
    staging_step: Option<f64>,
    /// Seconds between staging steps (0..=3600, default 5)
    #[arg(long, value_name = "T", value_parser = flags::number(0.0, 3600.0))]
    staging_cooldown: Option<f64>,
    /// Comma-separated (default all: round_robin,random,p2c,
    /// consistent_hash,bounded_load,model_aware)
    #[arg(long, value_name = "LIST", value_parser = flags::list(flags::one_of(&NAMES)))]
    strategies: Option<List<&'static str>>,
    /// Skip the membership changes
    #[arg(long)]
    no_churn: bool,
    /// Sweep vnodes, k, c and the staging step instead
    #[arg(long)]
    sweep: bool,
    /// One JSON object per line instead of the table, each with its
    /// "scenario"
    #[arg(long)]
    json: bool,
    /// Also write an SVG chart of the first scenario to PATH
    #[arg(long, value_name = "PATH")]
    svg: Option<PathBuf>,
}

/// `--scenario`'s value.
fn scenario(name: &str) -> Result<Scenario, String> {
    Scenario::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
        format!("unknown scenario `{name}` (one of {})", names.join(", "))
    })
}

impl Config {
    /// The program's configs (see [`Config::parse_from`]); on a bad
    /// command line, the error and the usage on stderr and exit 2
    /// (`--help`: the help, exit 0).
    pub fn from_env() -> Vec<Self> {
        Self::parse_from(std::env::args_os()).unwrap_or_else(|error| error.exit())
    }

    /// One config per scenario to run, in order: each scenario's preset
    /// with the flags of `args` (the program's name first) on top
    /// (`--scenario` picks one).
    pub fn parse_from<I, T>(args: I) -> Result<Vec<Self>, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let flags = Flags::try_parse_from(args)?;
        if let Some(List(names)) = &flags.strategies {
            if let Some(twice) = names
                .iter()
                .enumerate()
                .find(|(i, n)| names[..*i].contains(n))
            {
                return Err(Flags::command().error(
                    ErrorKind::ValueValidation,
                    format!("strategy `{}` given twice", twice.1),
                ));
            }
        }
        let scenarios = match flags.scenario {
            Some(scenario) => vec![scenario],
            None => Scenario::ALL.to_vec(),
        };
        scenarios
            .into_iter()
            .map(|s| {
                Config::preset(s)
                    .with_flags(&flags)
                    .map_err(|message| Flags::command().error(ErrorKind::ArgumentConflict, message))
            })
            .collect()
    }

    /// This config with `flags` on top, checked.
    fn with_flags(mut self, flags: &Flags) -> Result<Self, String> {
        let c = &mut self;
        fn set<T: Clone>(field: &mut T, flag: &Option<T>) {
            if let Some(value) = flag {
                *field = value.clone();
            }
        }
        set(&mut c.backends, &flags.backends);
        set(&mut c.models, &flags.models);
        set(&mut c.requests, &flags.requests);
        set(&mut c.seed, &flags.seed);
        set(&mut c.zipf, &flags.zipf);
        set(&mut c.utilization, &flags.utilization);
        set(&mut c.update_share, &flags.updates);
        set(&mut c.serving_slots, &flags.serving_slots);
        set(&mut c.inference_scale, &flags.inference_scale);
        set(&mut c.batch_slowdown, &flags.batch_slowdown);
        set(&mut c.model_slots, &flags.model_slots);
        set(&mut c.vnodes, &flags.vnodes);
        set(&mut c.owners, &flags.owners);
        set(&mut c.min_owners, &flags.min_owners);
        set(&mut c.load_factor, &flags.load_factor);
        set(&mut c.staging_step, &flags.staging_step);
        set(&mut c.staging_cooldown, &flags.staging_cooldown);
        if flags.owner_load.is_some() {
            c.owner_load = flags.owner_load;
        }
        if let Some(List(names)) = &flags.strategies {
            c.strategies = names.clone();
        }
        c.churn &= !flags.no_churn;
        c.sweep |= flags.sweep;
        c.json |= flags.json;
        if flags.svg.is_some() {
            c.svg = flags.svg.clone();
        }
        if c.min_owners > c.owners {
            return Err(format!("`--min-owners` is over `--owners` ({})", c.owners));
        }
        if c.owner_load.is_some_and(|load| load > c.load_factor) {
            return Err(format!(
                "`--owner-load` is over `--load-factor` ({})",
                c.load_factor
            ));
        }
        // The largest membership change adds 10% of the backends.
        let points = (c.backends + c.backends.div_ceil(10)) as u64 * u64::from(c.vnodes);
        if points > tower_model_balance::ring::MAX_POINTS as u64 {
            return Err(format!(
                "`--backends` × 1.1 × `--vnodes` is {points} ring points, over the ring's {}",
                tower_model_balance::ring::MAX_POINTS
            ));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Vec<Config>, clap::Error> {
        Config::parse_from(std::iter::once("simulate").chain(args.iter().copied()))
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
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(
            matches!(parse(&["--help"]), Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp)
        );
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
        assert!(parse(&["--scenario", "default", "--owner-load", "1.5"]).is_err());
        assert!(parse(&["--owners", "2", "--min-owners", "3"]).is_err());
    }
}
