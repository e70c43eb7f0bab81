//! Mock backends whose response bodies stay open (the request in flight)
//! until the test ends them, counting the requests each served.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::stream;
use http_body_util::StreamBody;
use hyper::body::Frame;
use tokio::sync::mpsc;
use tower::Service;

/// A body that ends when its sender, kept by the [`Mocks`], is dropped.
pub type Body = StreamBody<stream::BoxStream<'static, Result<Frame<Bytes>, Infallible>>>;

/// One backend: answers at once, with its status (200 unless set) and a
/// body that stays open.
#[derive(Clone)]
pub struct Mock {
    pub name: &'static str,
    status: Arc<AtomicU16>,
    open: Arc<Mutex<Vec<mpsc::Sender<Bytes>>>>,
    served: Arc<Mutex<HashMap<&'static str, usize>>>,
}

impl Mock {
    /// The status it answers with from now on.
    pub fn set_status(&self, code: u16) {
        self.status.store(code, Ordering::Relaxed);
    }
}

impl Service<http::Request<String>> for Mock {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<String>) -> Self::Future {
        *self.served.lock().unwrap().entry(self.name).or_default() += 1;
        let (tx, rx) = mpsc::channel::<Bytes>(1);
        self.open.lock().unwrap().push(tx);
        let frames = stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (Ok(Frame::data(b)), rx))
        });
        let body = StreamBody::new(Box::pin(frames) as stream::BoxStream<'static, _>);
        let mut response = http::Response::new(body);
        *response.status_mut() = http::StatusCode::from_u16(self.status.load(Ordering::Relaxed))
            .expect("a status the test set");
        std::future::ready(Ok(response))
    }
}

/// Mock backends sharing one record of open bodies and served requests.
pub struct Mocks {
    pub mocks: Vec<Mock>,
    open: Arc<Mutex<Vec<mpsc::Sender<Bytes>>>>,
    served: Arc<Mutex<HashMap<&'static str, usize>>>,
}

impl Mocks {
    pub fn new(names: &[&'static str]) -> Self {
        let open = Arc::new(Mutex::new(Vec::new()));
        let served = Arc::new(Mutex::new(HashMap::new()));
        let mocks = names
            .iter()
            .map(|&name| Mock {
                name,
                status: Arc::new(AtomicU16::new(200)),
                open: open.clone(),
                served: served.clone(),
            })
            .collect();
        Self {
            mocks,
            open,
            served,
        }
    }

    /// Requests served so far, by backend name.
    pub fn served(&self) -> HashMap<&'static str, usize> {
        self.served.lock().unwrap().clone()
    }

    /// Ends every open response body.
    pub fn close_bodies(&self) {
        self.open.lock().unwrap().clear();
    }
}
