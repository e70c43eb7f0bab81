//! Precise prefix routing in the gateway (`--kv-events`, `--tokenizer`):
//! the fleet's [`KvIndex`], fed by each backend's KV-cache events and read
//! by the balancer, and the [`PromptBlocksLayer`] that cuts each prompt
//! into the blocks the index keys.
//!
//! Why the gateway subscribes per `--backend`: vLLM publishes its events
//! on a ZeroMQ PUB socket of its own (`--kv-events-config '{"publisher":
//! "zmq", "endpoint": "tcp://*:5557"}'`), one per server, at an address the
//! gateway cannot derive from the server's HTTP origin. A backend from etcd
//! has no such address in its record yet: `--kv-events` goes with
//! `--backend` only.
//!
//! Where the prompts' tokens come from: the local tokenizer of
//! `--tokenizer DIR` when given, else the first such backend's own
//! `POST /tokenize` ([`ServerTokenize`](super::tokenize::ServerTokenize)),
//! which applies the model's chat template exactly as the server will.
//! Either way a prompt that is not tokenized is routed without its blocks,
//! never failed.

use std::path::Path;

use tower_model_balance::backend::BackendId;
use tower_model_balance::error::BoxError;
use tower_model_balance::kv::prompt::PromptTokenizer;
use tower_model_balance::kv::{
    self, KvEndpoint, KvIndex, PromptBlocksLayer, Tokenize, TokenizeFuture,
};
use tower_model_balance::task::BackgroundTask;

use super::client::BackendClient;
use super::config::Config;
use super::tokenize::{ServerTokenize, TOKENIZE_TIMEOUT};

/// Precise prefix routing, set up: the index for the balancer, the layer
/// for the stack, and the subscriptions that feed the index (stopped when
/// dropped).
#[derive(Debug)]
pub(super) struct Kv {
    pub(super) index: KvIndex,
    pub(super) layer: PromptBlocksLayer,
    pub(super) tasks: Vec<BackgroundTask>,
}

impl Kv {
    /// With any `config.kv_events`: the index, each backend's events
    /// subscribed to, and the prompts' tokenizer (`config.tokenizer`, else
    /// the first such backend's `/tokenize` through `client`). `None`
    /// without: no layer, no cost per request.
    pub(super) fn start(config: &Config, client: &BackendClient) -> Result<Option<Self>, BoxError> {
        let Some((first, _)) = config.kv_events.first() else {
            return Ok(None);
        };
        let index = KvIndex::default();
        let mut tasks = Vec::new();
        for (backend, endpoint) in &config.kv_events {
            tasks.extend(subscribe(&index, backend, endpoint)?);
        }
        let local = match &config.tokenizer {
            Some(dir) => local_tokenizer(dir)?,
            None => None,
        };
        let source = match local {
            Some(local) => Source(local),
            None => {
                let origin = config
                    .backends
                    .iter()
                    .find(|(id, _)| id == first)
                    .map(|(_, origin)| origin.clone())
                    .ok_or_else(|| format!("--kv-events for `{first}`: no such --backend"))?;
                Source(Box::new(ServerTokenize::new(
                    client.clone(),
                    origin,
                    TOKENIZE_TIMEOUT,
                )))
            }
        };
        let layer = PromptBlocksLayer::new(source, index.clone());
        Ok(Some(Self {
            index,
            layer,
            tasks,
        }))
    }
}

/// `backend`'s KV-cache events at `endpoint` (`--kv-events`' value,
/// checked: [`endpoints`]) into `index`; the task that reads them.
fn subscribe(
    index: &KvIndex,
    backend: &BackendId,
    endpoint: &str,
) -> Result<Option<BackgroundTask>, BoxError> {
    let (publisher, replay) = endpoints(endpoint)?;
    let mut endpoint = KvEndpoint::new(publisher)?;
    if let Some(replay) = replay {
        endpoint = endpoint.with_replay(replay)?;
    }
    Ok(Some(kv::subscribe(
        index.clone(),
        backend.clone(),
        endpoint,
    )?))
}

/// The local tokenizer of `--tokenizer DIR` (its `tokenizer.json`,
/// checked to exist when the flags were read).
fn local_tokenizer(dir: &Path) -> Result<Option<Box<dyn Tokenize>>, BoxError> {
    let tokenizer = PromptTokenizer::from_dir(dir)
        .map_err(|e| format!("--tokenizer `{}`: {e}", dir.display()))?;
    Ok(Some(Box::new(tokenizer)))
}

/// The prompts' tokenizer, local or the server's.
struct Source(Box<dyn Tokenize>);

impl Tokenize for Source {
    fn tokenize<'a>(&'a self, path: &'a str, body: &'a bytes::Bytes) -> TokenizeFuture<'a> {
        self.0.tokenize(path, body)
    }
}

/// What `--kv-events` expects, in its error.
const EXPECTED: &str = "expected tcp://HOST:PORT, or tcp://HOST:PORT,replay=tcp://HOST:PORT";

/// `--kv-events`' value: the server's event publisher, `tcp://HOST:PORT`,
/// and after `,replay=` its replay endpoint, the same way written. A
/// server binds `tcp://*:PORT`; the gateway connects to its host, so `*`
/// is refused.
///
/// # Errors
///
/// The message names `--kv-events` and the value.
pub(crate) fn endpoints(text: &str) -> Result<(&str, Option<&str>), String> {
    let (publisher, replay) = match text.split_once(',') {
        Some((publisher, rest)) => match rest.strip_prefix("replay=") {
            Some(replay) => (publisher, Some(replay)),
            None => return Err(format!("--kv-events `{text}`: {EXPECTED}")),
        },
        None => (text, None),
    };
    for url in std::iter::once(publisher).chain(replay) {
        tcp(url).map_err(|why| format!("--kv-events `{text}`: {EXPECTED}{why}"))?;
    }
    Ok((publisher, replay))
}

/// `url` as `tcp://HOST:PORT`; the error's tail, if it has something to
/// add.
fn tcp(url: &str) -> Result<(), &'static str> {
    let address = url.strip_prefix("tcp://").ok_or("")?;
    let (host, port) = address.rsplit_once(':').ok_or("")?;
    if host == "*" {
        return Err(" (`*` is where the server binds: give its host)");
    }
    let bracketed = host.starts_with('[') && host.ends_with(']');
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    let host_ok = !host.is_empty() && (bracketed || host.chars().all(allowed));
    let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    match (host_ok && digits, port.parse::<u16>()) {
        (true, Ok(port)) if port > 0 => Ok(()),
        _ => Err(""),
    }
}

#[cfg(test)]
mod tests {
    use super::endpoints;

    #[test]
    fn endpoints_read_as_tcp_host_port() {
        assert_eq!(
            endpoints("tcp://10.0.0.1:5557"),
            Ok(("tcp://10.0.0.1:5557", None))
        );
        assert_eq!(
            endpoints("tcp://vllm-0:5557,replay=tcp://vllm-0:5558"),
            Ok(("tcp://vllm-0:5557", Some("tcp://vllm-0:5558")))
        );
        assert!(endpoints("tcp://[::1]:5557").is_ok());
        for bad in [
            "10.0.0.1:5557",
            "http://10.0.0.1:5557",
            "tcp://10.0.0.1",
            "tcp://:5557",
            "tcp://h:0",
            "tcp://h:65536",
            "tcp://h/x:1",
            "tcp://h:1,tcp://h:2",
            "tcp://h:1,replay=h:2",
        ] {
            let message = endpoints(bad).unwrap_err();
            assert!(
                message.starts_with(&format!("--kv-events `{bad}`: expected tcp://HOST:PORT")),
                "{message}"
            );
        }
        let message = endpoints("tcp://*:5557").unwrap_err();
        assert!(
            message.ends_with("(`*` is where the server binds: give its host)"),
            "{message}"
        );
    }
}
