//! The gateway tests' running gateway (`tests/gateway/service.rs`): the
//! library's app on 127.0.0.1 in front of simulated backends, a client reading each
//! reply whole, and raw connections that break a body off or hold it open.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::BalancerHandle;
use tower_model_balance::discover::etcd::EtcdHandle;
use tower_model_balance::endpoint::Origin;
use tower_model_balance::hedge::HedgeHandle;
use tower_model_balance_sim::{protocol, ModelServer, ServerConfig};

use crate::app::{self, Config, Gateway};

/// A gateway serving on loopback, its backends and a client.
pub struct Running {
    pub addr: SocketAddr,
    /// The admin listener: `/metrics`, readiness.
    pub admin: SocketAddr,
    pub sims: Vec<ModelServer>,
    pub handle: BalancerHandle,
    pub hedge: HedgeHandle,
    /// The etcd source's counters, when its backends come from etcd.
    pub etcd: Option<EtcdHandle>,
    pub client: Client<HttpConnector, Full<Bytes>>,
    pub server: JoinHandle<()>,
    /// The gateway's drain.
    pub drain: app::Drain,
    /// Resolves the shutdown future: the drain begins.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A reply: status, headers, body text.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Starts `sims` simulated backends named `{name}-{i}` and the gateway in
/// front of them; `edit` changes the config first.
pub async fn start(name: &str, sims: usize, edit: impl FnOnce(&mut Config)) -> Running {
    start_with(name, sims, ServerConfig::default(), edit).await
}

/// As [`start`], the backends running `server`.
pub async fn start_with(
    name: &str,
    sims: usize,
    server: ServerConfig,
    edit: impl FnOnce(&mut Config),
) -> Running {
    let (mut config, servers) = fleet(name, sims, server).await;
    edit(&mut config);
    serve(config, servers).await
}

/// `sims` simulated backends running `server` and the gateway in front,
/// its listener served with `serve`.
pub async fn start_served(
    name: &str,
    sims: usize,
    server: ServerConfig,
    serve: app::ServeConfig,
) -> Running {
    let (config, servers) = fleet(name, sims, server).await;
    serve_with(config, servers, serve).await
}

/// `sims` simulated backends named `{name}-{i}` running `server`, and the
/// gateway's config for them.
async fn fleet(name: &str, sims: usize, server: ServerConfig) -> (Config, Vec<ModelServer>) {
    let mut servers = Vec::new();
    let mut backends = Vec::new();
    for i in 0..sims {
        let server = ModelServer::start(&format!("{name}-{i}"), server.clone())
            .await
            .unwrap();
        backends.push((
            BackendId::new(server.name()).unwrap(),
            Origin::http(server.addr()),
        ));
        servers.push(server);
    }
    let mut config = Config::new(backends);
    config.residency_header = Some(protocol::RESIDENT_MODELS_HEADER);
    // The simulated servers load a model when a request names it.
    config.placement = false;
    (config, servers)
}

pub async fn serve(config: Config, sims: Vec<ModelServer>) -> Running {
    serve_with(config, sims, app::ServeConfig::default()).await
}

/// As [`serve`], the gateway's listener served with `serve`: its drain
/// begins at [`Running::shut_down`].
pub async fn serve_with(
    config: Config,
    sims: Vec<ModelServer>,
    serve: app::ServeConfig,
) -> Running {
    let gateway = Gateway::new(config).unwrap();
    let drain = gateway.drain.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = admin_listener.local_addr().unwrap();
    let handle = gateway.handle.clone();
    let hedge = gateway.hedge.clone();
    let etcd = gateway.etcd.clone();
    let server = tokio::spawn(async move {
        // The gateway's probes live as long as the server.
        let Gateway { router, admin, .. } = &gateway;
        let admin = app::serve(admin_listener, admin.clone(), std::future::pending());
        let stopped = async {
            let _ = stopped.await;
        };
        let public = app::serve_with(listener, router.clone(), stopped, serve, &gateway.drain);
        tokio::select! {
            served = public => served.unwrap(),
            served = admin => served.unwrap(),
        }
    });
    Running {
        addr,
        admin,
        sims,
        handle,
        hedge,
        etcd,
        client: Client::builder(TokioExecutor::new()).build_http(),
        server,
        drain,
        stop: Some(stop),
    }
}

impl Running {
    pub async fn post(&self, path: &str, body: impl Into<Bytes>) -> Reply {
        let req = http::Request::post(format!("http://{}{path}", self.addr))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body.into()))
            .unwrap();
        self.send(req).await
    }

    /// A GET on the admin listener (`/metrics`, readiness).
    pub async fn admin_get(&self, path: &str) -> Reply {
        let uri = format!("http://{}{path}", self.admin);
        let req = http::Request::get(uri)
            .body(Full::new(Bytes::new()))
            .unwrap();
        self.send(req).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        let req = http::Request::get(format!("http://{}{path}", self.addr))
            .body(Full::default())
            .unwrap();
        self.send(req).await
    }

    /// Opens a chat completion stream of `model` asking `tokens` tokens:
    /// its answer's body, after a 200 head (bounded: 20 s).
    pub async fn open_stream(&self, model: &str, tokens: u32) -> hyper::body::Incoming {
        let body = format!(
            r#"{{"model": "{model}", "stream": true, "max_tokens": {tokens}, "messages": [{{"role": "user", "content": "hi"}}]}}"#
        );
        let req = http::Request::post(format!("http://{}/v1/chat/completions", self.addr))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = tokio::time::timeout(Duration::from_secs(20), self.client.request(req))
            .await
            .expect("a head")
            .unwrap();
        assert_eq!(response.status(), 200);
        response.into_body()
    }

    /// Sends `req` and reads the whole answer; fails, never hangs.
    pub async fn send(&self, req: http::Request<Full<Bytes>>) -> Reply {
        let exchange = async {
            let rsp = self.client.request(req).await.unwrap();
            let (parts, body) = rsp.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            Reply {
                status: parts.status,
                headers: parts.headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            }
        };
        tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .expect("the gateway answers within 10 s")
    }

    /// Waits (bounded: 10 s) until the admin listener's `/ready` answers
    /// 200: a backend answered (the first probe round runs at the start).
    pub async fn until_ready(&self) {
        for _ in 0..200 {
            if self.admin_get("/ready").await.status == StatusCode::OK {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("never ready: {:?}", self.handle.backends());
    }

    /// Begins the drain, as SIGTERM does the binary's.
    pub fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Inference and update requests the backends received, in all.
    pub fn backend_work(&self) -> u64 {
        self.sims.iter().map(|s| s.stats().work).sum()
    }
}

/// Sends `head` (a request line and headers announcing more body than
/// follows) and `body`, then closes the sending side: a client that breaks
/// its upload off. Returns the status line.
pub async fn truncated(addr: SocketAddr, path: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer));
    read.await.expect("answered").unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or_default().to_string()
}

/// Sends `head` (a request line and headers) and `body`, keeping the
/// connection open, and returns the status line of the answer.
pub async fn held_open(addr: SocketAddr, head: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut answer = vec![0; 1024];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer));
    let n = read
        .await
        .expect("answered while the client still holds on")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    answer.lines().next().unwrap_or_default().to_string()
}
