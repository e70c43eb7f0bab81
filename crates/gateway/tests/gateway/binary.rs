//! The `gateway` binary started as an operator starts it, on ports the
//! system picks: its addresses read from its messages (standard error),
//! both its outputs read on (the access log is its standard output).

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tower_model_balance_sim::{ModelServer, ServerConfig};

/// A running `gateway` process.
pub struct Binary {
    pub child: Child,
    /// Its standard output: the access log.
    pub stdout: Lines<BufReader<ChildStdout>>,
    /// Its standard error, past the lines that gave its addresses.
    pub stderr: Lines<BufReader<ChildStderr>>,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    /// The simulated servers it sends to ([`start_with_sims`]), serving
    /// while this lives.
    pub sims: Vec<ModelServer>,
}

/// `sims` simulated servers (`sim-0`, …) and `gateway` in front of them
/// with `args`, as a user runs the `sims` binary and the gateway with a
/// `--backend NAME=URL` for each (`--no-placement`: they load a model
/// when a request names it).
pub async fn start_with_sims(sims: usize, args: &[&str]) -> Binary {
    let mut servers = Vec::new();
    let mut flags = vec!["--no-placement".to_owned()];
    for i in 0..sims {
        let name = format!("sim-{i}");
        let server = ModelServer::start(&name, ServerConfig::default())
            .await
            .unwrap();
        flags.extend([
            "--backend".into(),
            format!("{name}=http://{}", server.addr()),
        ]);
        servers.push(server);
    }
    let flags: Vec<&str> = flags
        .iter()
        .map(String::as_str)
        .chain(args.iter().copied())
        .collect();
    let mut binary = start(&flags).await;
    binary.sims = servers;
    binary
}

/// Starts `gateway` with `args` and `--listen`, `--admin-listen` on ports
/// of the system's choosing; waits (bounded) for it to print them.
pub async fn start(args: &[&str]) -> Binary {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gateway"))
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut addr, mut admin) = (None, None);
    while addr.is_none() || admin.is_none() {
        let line = tokio::time::timeout(Duration::from_secs(20), stderr.next_line());
        let line = line.await.expect("its addresses within 20 s").unwrap();
        let line = line.expect("the gateway prints its addresses");
        let url = |prefix: &str| {
            let rest = line.strip_prefix(prefix)?;
            rest.split_whitespace()
                .next()?
                .trim_end_matches(':')
                .parse()
                .ok()
        };
        addr = addr.or_else(|| url("gateway on http://"));
        admin = admin.or_else(|| url("admin on http://"));
    }
    Binary {
        child,
        stdout,
        stderr,
        addr: addr.unwrap(),
        admin: admin.unwrap(),
        sims: Vec::new(),
    }
}

impl Binary {
    /// The next line of its access log (standard output) that starts with
    /// `prefix` (bounded: 20 s).
    pub async fn line_starting(&mut self, prefix: &str) -> String {
        let find = async {
            loop {
                let line = self.stdout.next_line().await.unwrap().expect("more output");
                if line.starts_with(prefix) {
                    return line;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), find)
            .await
            .unwrap_or_else(|_| panic!("no line starting with {prefix:?}"))
    }
}
