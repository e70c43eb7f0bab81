//! The peer comparison's flags.

use std::path::PathBuf;
use std::time::Duration;

use crate::load::Workload;
use crate::router::VLLM_POLICIES;

pub const USAGE: &str = "\
usage: bash scripts/peer-compare [FLAGS]
       (cargo run --release --bin peer -- FLAGS, with vLLM Router installed)

  --rates LIST         offered loads, requests per second, comma-separated
                       (each 1..=100000; default 100,200,300)
  --duration SECS      how long each run sends (0.5..=600, default 10)
  --policies LIST      vLLM Router's policies, comma-separated, of
                       cache_aware, power_of_two, round_robin, consistent_hash,
                       random (default: all five)
  --no-max-rate        skip the search for each router's highest sustained rate
  --search-duration S  how long each step of that search sends (0.5..=600,
                       default 5)
  --workload W         plain (default: Zipf(1.1) over 32 models, a prompt of its
                       own per request) or prefix (one model, prompts sharing
                       long prefixes, chat sessions; the servers with a prefix
                       cache, the gateway with --prefix-bytes 100 and
                       --session-header x-session-id; the hit% column)
  --backends N         simulated servers per run (1..=64, default 8)
  --seed N             the workload's seed (default 1)
  --gateway PATH       the gateway's binary (default: the one cargo builds, in
                       this one's profile folder: target/release/gateway)
  --bare-proxy PATH    the bare proxy's binary (default: the one cargo builds
                       there: target/release/bare-proxy)
  --vllm-router PATH   vLLM Router's launcher
                       (default target/venv-vllm-router/bin/vllm-router)
  --logs DIR           where each router's output goes (default target/peer-logs)
  --smoke              a short check: 100 req/s for 2 s, direct, bare, bare oracle
                       (plain workload), the gateway and vLLM Router's cache_aware,
                       no search; fails unless each answered and had its CPU
                       time read. --rates, --duration and --policies given
                       with it replace those values
  -h, --help           this text

Each flag may be given once. The programs and --logs are checked
before any run: a bad one exits 2.";

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

/// Why parsing stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    Help,
    Error(String),
}

fn seconds(text: &str, flag: &str) -> Result<Duration, Stop> {
    match text.parse::<f64>() {
        Ok(s) if (0.5..=600.0).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(Stop::Error(format!(
            "{flag}: `{text}` is not a number of seconds in 0.5..=600"
        ))),
    }
}

impl Args {
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, Stop> {
        let mut parsed = Args {
            workload: Workload::Plain,
            rates: vec![100.0, 200.0, 300.0],
            duration: Duration::from_secs(10),
            policies: VLLM_POLICIES.iter().map(|p| (*p).to_owned()).collect(),
            max_rate: true,
            search_duration: Duration::from_secs(5),
            backends: 8,
            seed: 1,
            gateway: None,
            bare_proxy: None,
            vllm_router: PathBuf::from("target/venv-vllm-router/bin/vllm-router"),
            logs: PathBuf::from("target/peer-logs"),
            smoke: false,
        };
        let mut args = args.into_iter();
        let mut seen: Vec<String> = Vec::new();
        while let Some(flag) = args.next() {
            if seen.contains(&flag) {
                return Err(Stop::Error(format!("{flag} given twice")));
            }
            seen.push(flag.clone());
            let mut value = |name: &str| {
                args.next()
                    .ok_or_else(|| Stop::Error(format!("{name} needs a value")))
            };
            match flag.as_str() {
                "-h" | "--help" => return Err(Stop::Help),
                "--rates" => {
                    let text = value("--rates")?;
                    parsed.rates = text
                        .split(',')
                        .map(|r| match r.trim().parse::<f64>() {
                            Ok(rate) if (1.0..=100_000.0).contains(&rate) => Ok(rate),
                            _ => Err(Stop::Error(format!(
                                "--rates: `{r}` is not a rate in 1..=100000"
                            ))),
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--duration" => parsed.duration = seconds(&value("--duration")?, "--duration")?,
                "--search-duration" => {
                    parsed.search_duration =
                        seconds(&value("--search-duration")?, "--search-duration")?;
                }
                "--policies" => {
                    let text = value("--policies")?;
                    parsed.policies = text
                        .split(',')
                        .map(|p| match VLLM_POLICIES.contains(&p.trim()) {
                            true => Ok(p.trim().to_owned()),
                            false => Err(Stop::Error(format!(
                                "--policies: `{p}` is not one of {}",
                                VLLM_POLICIES.join(", ")
                            ))),
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--no-max-rate" => parsed.max_rate = false,
                "--workload" => {
                    parsed.workload = match value("--workload")?.as_str() {
                        "plain" => Workload::Plain,
                        "prefix" => Workload::Prefix,
                        other => {
                            return Err(Stop::Error(format!(
                                "--workload: `{other}` is not plain or prefix"
                            )))
                        }
                    };
                }
                "--backends" => {
                    let text = value("--backends")?;
                    parsed.backends = match text.parse::<usize>() {
                        Ok(n) if (1..=64).contains(&n) => n,
                        _ => {
                            return Err(Stop::Error(format!(
                                "--backends: `{text}` is not a count in 1..=64"
                            )))
                        }
                    };
                }
                "--seed" => {
                    let text = value("--seed")?;
                    parsed.seed = text.parse().map_err(|_| {
                        Stop::Error(format!("--seed: `{text}` is not a whole number"))
                    })?;
                }
                "--gateway" => parsed.gateway = Some(PathBuf::from(value("--gateway")?)),
                "--bare-proxy" => {
                    parsed.bare_proxy = Some(PathBuf::from(value("--bare-proxy")?));
                }
                "--vllm-router" => parsed.vllm_router = PathBuf::from(value("--vllm-router")?),
                "--logs" => parsed.logs = PathBuf::from(value("--logs")?),
                "--smoke" => parsed.smoke = true,
                "--dev" => return Err(Stop::Error(
                    "--dev is scripts/peer-compare's flag (the debug builds), not this program's"
                        .to_owned(),
                )),
                other => return Err(Stop::Error(format!("unknown flag `{other}`"))),
            }
        }
        if parsed.smoke {
            // The smoke run's own values, where no flag gave one: 100 req/s
            // for 2 s, vLLM Router's cache_aware, no search.
            let given = |flag: &str| seen.iter().any(|f| f == flag);
            if !given("--rates") {
                parsed.rates = vec![100.0];
            }
            if !given("--duration") {
                parsed.duration = Duration::from_secs(2);
            }
            if !given("--policies") {
                parsed.policies = vec!["cache_aware".to_owned()];
            }
            if given("--search-duration") {
                return Err(Stop::Error(
                    "--search-duration with --smoke: the smoke run has no search".to_owned(),
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

    fn parse(args: &[&str]) -> Result<Args, Stop> {
        Args::parse(args.iter().map(|s| (*s).to_owned()))
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
            Err(Stop::Error(message)) => assert!(message.contains("no search"), "{message}"),
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
                Err(Stop::Error(message)) => assert!(message.contains("twice"), "{message}"),
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
            (&["--seed"], "needs a value"),
            (&["--bogus"], "unknown flag"),
            (&["--dev"], "scripts/peer-compare's flag"),
        ] {
            match parse(args) {
                Err(Stop::Error(message)) => assert!(message.contains(says), "{message}"),
                other => panic!("{args:?}: {other:?}"),
            }
        }
        assert_eq!(parse(&["-h"]), Err(Stop::Help));
    }
}
