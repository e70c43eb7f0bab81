//! [`KvEndpoint`]: where a vLLM server publishes its KV-cache events.

use std::str::FromStr;

use zeromq::{Endpoint, Host};

use crate::error::InvalidConfig;

/// A vLLM server's KV-cache event sockets, as a subscriber connects to
/// them: the publisher (vLLM's `--kv-events-config` `endpoint`, bound by
/// vLLM as `tcp://*:5557`, reached here as `tcp://host:5557`) and, when
/// vLLM has one, its replay socket (`replay_endpoint`, always bound by
/// vLLM), which gives back the batches a subscriber missed.
///
/// Without a replay socket, batches lost in transit (a slow start, a
/// reconnection) are lost for good: the backend's blocks are cleared and
/// relearnt from the events that follow.
///
/// ```
/// use tower_model_balance::kv::KvEndpoint;
///
/// let endpoint = KvEndpoint::new("tcp://10.0.0.7:5557")
///     .unwrap()
///     .with_replay("tcp://10.0.0.7:5558")
///     .unwrap();
/// assert_eq!(endpoint.replay(), Some("tcp://10.0.0.7:5558"));
/// assert!(KvEndpoint::new("tcp://*:5557").is_err()); // vLLM's side
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvEndpoint {
    publisher: String,
    replay: Option<String>,
}

impl KvEndpoint {
    /// The publisher at `publisher`, `tcp://host:port` (a host name or an
    /// IP address, IPv6 in brackets), without a replay socket.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `publisher` for anything else: another
    /// transport, a wildcard or unspecified host (`*`, `0.0.0.0`: the
    /// address vLLM binds, not one to connect to), or port 0.
    pub fn new(publisher: &str) -> Result<Self, InvalidConfig> {
        check(publisher, "publisher")?;
        Ok(Self {
            publisher: publisher.to_owned(),
            replay: None,
        })
    }

    /// With vLLM's replay socket at `replay`, `tcp://host:port`.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `replay`, as [`KvEndpoint::new`].
    pub fn with_replay(mut self, replay: &str) -> Result<Self, InvalidConfig> {
        check(replay, "replay")?;
        self.replay = Some(replay.to_owned());
        Ok(self)
    }

    /// The publisher's address.
    pub fn publisher(&self) -> &str {
        &self.publisher
    }

    /// The replay socket's address, if any.
    pub fn replay(&self) -> Option<&str> {
        self.replay.as_deref()
    }
}

fn check(address: &str, field: &'static str) -> Result<(), InvalidConfig> {
    const EXPECTED: &str =
        "tcp://host:port, with a host to connect to (not * or 0.0.0.0) and a port of 1 ..= 65535";
    let ok = match Endpoint::from_str(address) {
        Ok(Endpoint::Tcp(host, port)) => {
            port != 0
                && match host {
                    Host::Ipv4(ip) => !ip.is_unspecified(),
                    Host::Ipv6(ip) => !ip.is_unspecified(),
                    Host::Domain(name) => !name.is_empty() && !name.contains('*'),
                }
        }
        _ => false,
    };
    ok.then_some(()).ok_or(InvalidConfig::new(field, EXPECTED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tcp_addresses_to_connect_to() {
        for good in [
            "tcp://127.0.0.1:5557",
            "tcp://vllm-0.svc:1",
            "tcp://[::1]:5557",
        ] {
            assert_eq!(KvEndpoint::new(good).unwrap().publisher(), good);
        }
        for bad in [
            "",
            "tcp://*:5557",
            "tcp://0.0.0.0:5557",
            "tcp://[::]:5557",
            "tcp://host:0",
            "tcp://host:70000",
            "tcp://host",
            "ipc:///tmp/kv",
            "http://host:5557",
        ] {
            assert_eq!(
                KvEndpoint::new(bad).unwrap_err().field,
                "publisher",
                "{bad}"
            );
        }
        let endpoint = KvEndpoint::new("tcp://a:1").unwrap();
        assert_eq!(
            endpoint.with_replay("tcp://*:2").unwrap_err().field,
            "replay"
        );
    }
}
