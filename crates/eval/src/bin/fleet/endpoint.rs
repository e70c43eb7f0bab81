//! The servers as a strategy reaches them: one HTTP client, shared, and
//! an endpoint per server (the client with the server's origin).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::SetOrigin;
use tower_model_balance_sim::ModelServer;

/// One server's endpoint: the shared client, sending to its origin.
pub type Endpoint = SetOrigin<Client<HttpConnector, Full<Bytes>>>;

/// The HTTP client every endpoint of a strategy shares.
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        // Without a timer the idle timeout is never checked.
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// An endpoint for each of `servers`, named by the server.
pub fn endpoints(servers: &[ModelServer]) -> Vec<(BackendId, Endpoint)> {
    let client = client();
    servers
        .iter()
        .map(|s| {
            let id = BackendId::new(s.name()).expect("server names are valid IDs");
            let origin = format!("http://{}", s.addr());
            (
                id,
                SetOrigin::new(client.clone(), &origin)
                    .expect("a socket address is a valid origin"),
            )
        })
        .collect()
}
