//! The gateway's app (`crates/gateway`) in front of the vLLM servers, and the HTTP
//! calls the checks make to it and to the servers directly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{BackendStatus, BalancerHandle};
use tower_model_balance::endpoint::Origin;

use crate::fixture::Vllm;
use tower_model_balance_gateway::app::{self, Config, Gateway, Probe};

/// The header naming a conversation, for prefix affinity.
pub const SESSION_HEADER: &str = "x-session-id";

/// The gateway serving on loopback in front of the servers.
pub struct Running {
    pub url: String,
    /// The admin listener's: `/metrics`, readiness.
    pub admin_url: String,
    pub handle: BalancerHandle,
    _gateway: Arc<Gateway>,
    server: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Running {
    /// The backend the balancer knows as `name`.
    pub fn backend(&self, name: &str) -> BackendStatus {
        self.handle
            .backends()
            .into_iter()
            .find(|b| b.id.as_str() == name)
            .expect("a current backend")
    }

    /// Waits (bounded: 30 s) until every backend's probe has listed its
    /// models, so that `GET /v1/models` and a body without `model` see
    /// the fleet.
    pub async fn wait_models(&self) {
        let started = Instant::now();
        loop {
            let (status, body) = get(&format!("{}/v1/models", self.url)).await;
            if status == 200 && body.contains(crate::fixture::MODEL) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no models listed: {body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The gateway as a vLLM user runs it (`--probe openai`, no placement),
/// with each answer's routing receipt; `prefix`: prefix affinity on
/// (`--prefix-bytes 256 --session-header x-session-id`).
pub async fn start(servers: &[Vllm], prefix: bool) -> Running {
    start_with(servers, |config| {
        if prefix {
            config.prefix_bytes = Some(256);
            config.session_header = Some(HeaderName::from_static(SESSION_HEADER));
        }
    })
    .await
}

/// The gateway routing by the servers' KV-cache events (`--kv-events`
/// for each, `--tokenizer` the tiny model's folder), without
/// `--prefix-bytes`: a prompt no server holds goes where the ring places
/// its first block.
pub async fn start_kv(servers: &[Vllm]) -> Running {
    let python = crate::fixture::installed().expect("vLLM installed");
    let model = crate::fixture::model(&python);
    start_with(servers, |config| {
        config.kv_events = servers
            .iter()
            .map(|s| (BackendId::new(&s.name).unwrap(), s.kv_events()))
            .collect();
        config.tokenizer = Some(model.clone());
    })
    .await
}

/// The gateway as a vLLM user runs it, with `tune` applied to its config.
async fn start_with(servers: &[Vllm], tune: impl FnOnce(&mut Config)) -> Running {
    let backends = servers
        .iter()
        .map(|s| {
            let addr = SocketAddr::from(([127, 0, 0, 1], s.port));
            (BackendId::new(&s.name).unwrap(), Origin::http(addr))
        })
        .collect();
    let mut config = Config::new(backends);
    config.probe = Probe::OpenAi;
    config.placement = false;
    config.receipt_header = true;
    // vLLM's scheduler serves up to `--max-num-seqs` (16) at once.
    config.backend_slots = 16;
    // The CPU build's first token may wait behind others' prefill.
    config.timeouts.first_token = Duration::from_secs(120);
    config.timeouts.idle = Duration::from_secs(120);
    tune(&mut config);
    let gateway = Arc::new(Gateway::new(config).expect("gateway"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = gateway.router.clone();
    let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_addr = admin_listener.local_addr().unwrap();
    let admin = gateway.admin.clone();
    let server = tokio::spawn(async move {
        let admin = app::serve(admin_listener, admin, std::future::pending());
        let public = app::serve(listener, router, std::future::pending());
        let (a, b) = tokio::join!(admin, public);
        a.unwrap();
        b.unwrap();
    });
    let running = Running {
        url: format!("http://{addr}"),
        admin_url: format!("http://{admin_addr}"),
        handle: gateway.handle.clone(),
        _gateway: gateway,
        server,
    };
    running.wait_models().await;
    running
}

/// One client for every call: kept-alive connections, as users have.
pub fn client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(reqwest::Client::new)
}

/// `GET url`: the status and the body.
pub async fn get(url: &str) -> (u16, String) {
    let response = client().get(url).send().await.expect("GET");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

/// An answer: status, the backend the gateway's receipt names (none from
/// a server directly), the body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub backend: Option<String>,
    pub body: String,
}

/// The backend a receipt header names.
fn backend_of(response: &reqwest::Response) -> Option<String> {
    let receipt = response.headers().get("x-route-receipt")?.to_str().ok()?;
    let field = receipt
        .split("; ")
        .find_map(|f| f.strip_prefix("backend="))?;
    Some(field.to_owned())
}

/// `POST url` with the JSON `body` (and a session, if given).
pub async fn post(url: &str, body: &str, session: Option<&str>) -> Answer {
    let mut request = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(session) = session {
        request = request.header(SESSION_HEADER, session);
    }
    let response = request.send().await.expect("POST");
    let status = response.status().as_u16();
    let backend = backend_of(&response);
    Answer {
        status,
        backend,
        body: response.text().await.expect("body"),
    }
}

/// A streamed answer in progress.
pub struct Stream {
    pub response: reqwest::Response,
    pub backend: Option<String>,
    /// From the request's start to its first `data:` chunk.
    pub ttft: Duration,
    /// What was read so far.
    pub text: String,
}

/// `POST url` with `body` (which asks for a stream), read up to its first
/// `data:` chunk.
pub async fn open_stream(url: &str, body: &str) -> Stream {
    let started = Instant::now();
    let mut response = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), 200, "stream refused");
    let backend = backend_of(&response);
    let mut text = String::new();
    while !text.contains("data: ") {
        let chunk = response.chunk().await.expect("a chunk").expect("not ended");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    Stream {
        ttft: started.elapsed(),
        response,
        backend,
        text,
    }
}

impl Stream {
    /// Reads the stream to its end: the whole text, or the error that cut
    /// it.
    pub async fn finish(mut self) -> Result<String, String> {
        loop {
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.text.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(None) => return Ok(self.text),
                Err(error) => return Err(format!("{error}")),
            }
        }
    }
}

/// A chat request's body: `content` as the user's message, `max_tokens`
/// generated (`ignore_eos`: exactly that many), streamed or not.
pub fn chat(content: &str, max_tokens: u32, stream: bool) -> String {
    serde_json::json!({
        "model": crate::fixture::MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": true,
        "stream": stream,
    })
    .to_string()
}

/// The median of `values`.
pub fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// The crate's client stack with no gateway: a `ModelBalancer` (two
/// owners) over one hyper-util client, a `SetOrigin` endpoint per server.
pub fn client_balancer(
    servers: &[Vllm],
) -> tower_model_balance::balance::ModelBalancer<
    tower_model_balance::endpoint::SetOrigin<
        hyper_util::client::legacy::Client<
            hyper_util::client::legacy::connect::HttpConnector,
            http_body_util::Full<bytes::Bytes>,
        >,
    >,
> {
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use tower::discover::ServiceList;
    use tower_model_balance::backend::Backend;
    use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
    use tower_model_balance::endpoint::SetOrigin;

    let client = Client::builder(TokioExecutor::new()).build_http();
    let backends: Vec<_> = servers
        .iter()
        .map(|s| {
            let origin = Origin::http(SocketAddr::from(([127, 0, 0, 1], s.port)));
            Backend::new(
                BackendId::new(&s.name).unwrap(),
                SetOrigin::to(client.clone(), origin),
            )
        })
        .collect();
    let config = BalanceConfig::builder().owners(2).build().unwrap();
    ModelBalancer::new(ServiceList::new(backends), config).unwrap()
}
