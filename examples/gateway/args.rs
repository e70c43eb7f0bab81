//! The gateway's flags.

use std::net::SocketAddr;

use tower_model_balance::endpoint::Origin;

pub const USAGE: &str = "\
usage: cargo run --release --example gateway [-- FLAGS]

  --listen ADDR        address to serve on (default 127.0.0.1:8080)
  --backend URL        a backend's origin, e.g. http://10.0.0.1:8000 (repeatable);
                       without it, simulated backends start on 127.0.0.1
  --sims N             how many simulated backends (1..=16, default 3)
  --down               the simulated backends answer 503 (every owner down):
                       after a few requests the gateway answers 503 itself,
                       with Retry-After
  --probe API          what the health probes ask: kserve (KServe v2 readiness
                       and repository, default) or openai (/v1/models); both
                       read vLLM-style /metrics
  --metrics-port PORT  the backends serve /metrics on this port of their host
                       (MLServer: 8082, Triton: 8002), not on their own port;
                       without it, on their own (a 404 there: no metrics)
  --metrics URL        where the --backend just before serves /metrics (for
                       servers sharing a host, each on a port of its own)
  --no-placement       do not load models: for servers that load on demand
                       (default with kserve: the gateway loads a model on the
                       owner it routes to, through the KServe v2 repository
                       API, as servers in explicit model-control mode need)
  --body-limit BYTES   most body bytes a request may send (1..=67108864,
                       default 67108864, 64 MiB: tensors travel in the body;
                       each request's body is held whole while it is routed):
                       past it, 413
  --admission-limit N  at most N requests in flight on each backend (1..=1000000;
                       default: no limit): past it a request is shed at once
                       with 429 and Retry-After (the gateway ignores clients'
                       x-urgency, as their other routing headers: every
                       request is Normal urgency)
  --prefix-bytes N     prefix affinity for LLM fleets: the first N bytes of an
                       OpenAI prompt (1..=65536) pick its owners, as the model
                       does without it (default: by the model alone)
  --session-header H   the header naming a request's conversation (as
                       x-session-id): its turns go back to the backend that
                       served the last one
  --receipt-header     each answer says why it went where it went, in
                       x-route-receipt (backend, reason, owners, predicted
                       prefix hit, runner-up)
  -h, --help           this text";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub listen: SocketAddr,
    pub backends: Vec<Origin>,
    pub sims: usize,
    pub down: bool,
    pub probe_openai: bool,
    pub body_limit: usize,
    pub metrics_port: Option<u16>,
    /// Each backend's own metrics origin (`--metrics`), by index.
    pub metrics: Vec<Option<Origin>>,
    pub placement: bool,
    /// `--admission-limit`: requests in flight per backend.
    pub admission_limit: Option<usize>,
    /// `--prefix-bytes`.
    pub prefix_bytes: Option<usize>,
    /// `--session-header`.
    pub session_header: Option<http::HeaderName>,
    /// `--receipt-header`.
    pub receipt_header: bool,
}

/// Why parsing stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    Help,
    Error(String),
}

impl Args {
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, Stop> {
        let mut parsed = Args {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            backends: Vec::new(),
            sims: 3,
            down: false,
            probe_openai: false,
            body_limit: 64 * 1024 * 1024,
            metrics_port: None,
            metrics: Vec::new(),
            placement: true,
            admission_limit: None,
            prefix_bytes: None,
            session_header: None,
            receipt_header: false,
        };
        let mut sims_given = false;
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let mut value = |name: &str| {
                args.next()
                    .ok_or_else(|| Stop::Error(format!("{name} needs a value")))
            };
            match flag.as_str() {
                "-h" | "--help" => return Err(Stop::Help),
                "--listen" => {
                    let text = value("--listen")?;
                    parsed.listen = text.parse().map_err(|_| {
                        Stop::Error(format!(
                            "--listen: `{text}` is not an address like 127.0.0.1:8080"
                        ))
                    })?;
                }
                "--backend" => {
                    let text = value("--backend")?;
                    let origin = Origin::parse(&text)
                        .map_err(|e| Stop::Error(format!("--backend `{text}`: {e}")))?;
                    if origin.scheme() != &http::uri::Scheme::HTTP {
                        return Err(Stop::Error(format!(
                            "--backend `{text}`: only http:// (the example's client has no TLS)"
                        )));
                    }
                    if parsed.backends.iter().any(|b| same_backend(b, &origin)) {
                        return Err(Stop::Error(format!(
                            "--backend `{text}` given twice: each backend once"
                        )));
                    }
                    parsed.backends.push(origin);
                    parsed.metrics.push(None);
                }
                "--metrics" => {
                    let text = value("--metrics")?;
                    let origin = Origin::parse(&text)
                        .map_err(|e| Stop::Error(format!("--metrics `{text}`: {e}")))?;
                    match parsed.metrics.last_mut() {
                        Some(slot @ None) => *slot = Some(origin),
                        Some(Some(_)) => {
                            return Err(Stop::Error(format!(
                                "--metrics `{text}`: the --backend before it has one already"
                            )))
                        }
                        None => {
                            return Err(Stop::Error(format!(
                                "--metrics `{text}` goes after the --backend it is for"
                            )))
                        }
                    }
                }
                "--sims" => {
                    parsed.sims = number(&value("--sims")?, "--sims", 1, 16)?;
                    sims_given = true;
                }
                "--down" => parsed.down = true,
                "--probe" => {
                    parsed.probe_openai = match value("--probe")?.as_str() {
                        "kserve" => false,
                        "openai" => true,
                        other => {
                            return Err(Stop::Error(format!(
                                "--probe: `{other}` is neither kserve nor openai"
                            )))
                        }
                    }
                }
                "--body-limit" => {
                    parsed.body_limit = number(
                        &value("--body-limit")?,
                        "--body-limit",
                        1,
                        // The route layer's largest limit: 64 MiB.
                        64 * 1024 * 1024,
                    )?;
                }
                "--metrics-port" => {
                    let port = number(&value("--metrics-port")?, "--metrics-port", 1, 65535)?;
                    parsed.metrics_port = u16::try_from(port).ok();
                }
                "--no-placement" => parsed.placement = false,
                "--prefix-bytes" => {
                    let n = number(&value("--prefix-bytes")?, "--prefix-bytes", 1, 65_536)?;
                    if parsed.prefix_bytes.replace(n).is_some() {
                        return Err(Stop::Error("--prefix-bytes given twice".into()));
                    }
                }
                "--session-header" => {
                    let text = value("--session-header")?;
                    let name = http::HeaderName::try_from(text.as_str()).map_err(|_| {
                        Stop::Error(format!("--session-header: `{text}` is not a header name"))
                    })?;
                    // The gateway strips the routing headers: a session
                    // there would never be read.
                    if ["x-model-id", "x-request-kind", "x-urgency"].contains(&name.as_str()) {
                        return Err(Stop::Error(format!(
                            "--session-header: `{name}` is a routing header, which the gateway strips"
                        )));
                    }
                    if parsed.session_header.replace(name).is_some() {
                        return Err(Stop::Error("--session-header given twice".into()));
                    }
                }
                "--receipt-header" => parsed.receipt_header = true,
                "--admission-limit" => {
                    if parsed.admission_limit.is_some() {
                        return Err(Stop::Error("--admission-limit given twice".into()));
                    }
                    let limit = value("--admission-limit")?;
                    parsed.admission_limit =
                        Some(number(&limit, "--admission-limit", 1, 1_000_000)?);
                }
                other => return Err(Stop::Error(format!("unknown flag `{other}`"))),
            }
        }
        if parsed.metrics_port.is_some() && parsed.metrics.iter().any(Option::is_some) {
            return Err(Stop::Error(
                "--metrics-port and --metrics: one or the other".into(),
            ));
        }
        if !parsed.backends.is_empty() && (parsed.down || sims_given) {
            return Err(Stop::Error(
                "--down and --sims apply to simulated backends, not with --backend".into(),
            ));
        }
        Ok(parsed)
    }
}

fn number(text: &str, flag: &str, min: usize, max: usize) -> Result<usize, Stop> {
    match text.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(Stop::Error(format!(
            "{flag}: `{text}` is not a whole number in {min}..={max}"
        ))),
    }
}

/// Whether two origins name the same backend: the same scheme, host (any
/// case) and port, the scheme's default port when none is written
/// (`http://a` is `http://a:80`; `http://a:01` is `http://a:1`).
fn same_backend(a: &Origin, b: &Origin) -> bool {
    let key = |o: &Origin| {
        let default = if o.scheme() == &http::uri::Scheme::HTTPS {
            443
        } else {
            80
        };
        let authority = o.authority();
        (
            o.scheme().clone(),
            authority.host().to_ascii_lowercase(),
            authority.port_u16().unwrap_or(default),
        )
    };
    key(a) == key(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, Stop> {
        Args::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn defaults_and_flags() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(args.body_limit, 64 << 20);
        assert!(args.placement && args.metrics_port.is_none());
        assert_eq!((args.sims, args.down, args.backends.len()), (3, false, 0));
        let args = parse(&[
            "--listen",
            "127.0.0.1:0",
            "--backend",
            "http://10.0.0.1:8000",
            "--backend",
            "http://10.0.0.2:8000",
            "--probe",
            "openai",
            "--body-limit",
            "2048",
            "--metrics-port",
            "8082",
            "--no-placement",
        ])
        .unwrap();
        assert_eq!(args.metrics_port, Some(8082));
        assert!(!args.placement);
        assert_eq!(args.listen.port(), 0);
        assert_eq!(args.backends.len(), 2);
        assert!(args.probe_openai);
        assert_eq!(args.body_limit, 2048);
        let args = parse(&[
            "--backend",
            "http://127.0.0.1:21001",
            "--metrics",
            "http://127.0.0.1:21201",
            "--backend",
            "http://127.0.0.1:21002",
        ])
        .unwrap();
        assert_eq!(args.metrics.len(), 2);
        assert_eq!(
            args.metrics[0].as_ref().unwrap().to_string(),
            "http://127.0.0.1:21201"
        );
        assert!(args.metrics[1].is_none());
        let args = parse(&["--sims", "5", "--down"]).unwrap();
        assert_eq!((args.sims, args.down), (5, true));
        assert_eq!(parse(&["--help"]), Err(Stop::Help));
    }

    #[test]
    fn bad_flags_are_errors_not_panics() {
        for bad in [
            &["--listen"][..],
            &["--listen", "localhost"],
            &["--backend", "not a url"],
            &["--backend", "https://10.0.0.1:8443"],
            &["--sims", "0"],
            &["--sims", "17"],
            &["--sims", "-1"],
            &["--probe", "grpc"],
            &["--body-limit", "0"],
            &["--body-limit", "67108865"],
            &["--prefix-bytes", "0"],
            &["--prefix-bytes", "65537"],
            &["--prefix-bytes", "1", "--prefix-bytes", "2"],
            &["--session-header", "bad header"],
            &["--session-header", "x-model-id"],
            &["--session-header", "a", "--session-header", "b"],
            &["--metrics-port", "0"],
            &["--metrics-port", "65536"],
            &["--metrics-port"],
            &["--metrics", "http://127.0.0.1:1"],
            &[
                "--backend",
                "http://a:1",
                "--metrics",
                "http://a:2",
                "--metrics",
                "http://a:3",
            ],
            &["--backend", "http://a:1", "--metrics", "not a url"],
            &[
                "--backend",
                "http://a:1",
                "--metrics",
                "http://a:2",
                "--metrics-port",
                "9",
            ],
            &["--body-limit", "99999999999999999999999"],
            &["--bogus"],
            &["--backend", "http://10.0.0.1:8000", "--down"],
            &["--backend", "http://10.0.0.1:8000", "--sims", "2"],
            &[
                "--backend",
                "http://10.0.0.1:8000",
                "--backend",
                "http://10.0.0.1:8000",
            ],
            // The same backend written another way.
            &["--backend", "http://a:1", "--backend", "http://a:01"],
            &["--backend", "http://a", "--backend", "http://a:80"],
            &[
                "--backend",
                "http://Node-1:8000",
                "--backend",
                "http://node-1:8000",
            ],
        ] {
            assert!(
                matches!(parse(bad), Err(Stop::Error(_))),
                "{bad:?} should fail"
            );
        }
    }
}
