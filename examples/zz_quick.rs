#[path = "../tests/support/ready.rs"]
mod ready;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Service, ServiceExt};
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer};
type Req = http::Request<()>;

fn seq() -> Vec<String> {
    let models: Vec<String> = (0..1000).map(|i| format!("model-{i:04}")).collect();
    let mut cdf: Vec<f64> = (1..=1000).map(|k| (k as f64).powf(-1.1)).collect();
    for i in 1..cdf.len() {
        cdf[i] += cdf[i - 1];
    }
    let total = cdf[999];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    (0..65536)
        .map(|_| {
            let u = rng.gen::<f64>() * total;
            models[cdf.partition_point(|&c| c < u).min(999)].clone()
        })
        .collect()
}

async fn drive<S: Service<Req>>(svc: &mut S, seq: &[String], iters: usize) -> Duration
where
    S::Error: std::fmt::Debug,
{
    let mut reqs = Vec::with_capacity(1024);
    let mut el = Duration::ZERO;
    let mut sent = 0;
    while sent < iters {
        reqs.clear();
        reqs.extend((0..1024).map(|i| ready::request(&seq[(sent + i) % seq.len()], "inference")));
        let t = Instant::now();
        for r in reqs.drain(..) {
            svc.ready().await.unwrap();
            std::hint::black_box(svc.call(r).await.unwrap());
        }
        el += t.elapsed();
        sent += 1024;
    }
    el
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(8);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let seq = std::sync::Arc::new(seq());
    let iters = std::env::args()
        .nth(3)
        .map(|s| s.parse::<usize>().unwrap())
        .unwrap_or(200)
        * 1024;
    let rounds = std::env::args()
        .nth(4)
        .map(|s| s.parse::<usize>().unwrap())
        .unwrap_or(7);
    let (mut best_mb, mut best_p2c) = (f64::MAX, f64::MAX);
    for _round in 0..rounds {
        let s = seq.clone();
        let mb = rt.block_on(async move {
            tokio::spawn(async move {
                let backends: Vec<_> = (0..n)
                    .map(|i| {
                        Backend::new(
                            BackendId::new(&format!("backend-{i}")).unwrap(),
                            ready::Ready,
                        )
                    })
                    .collect();
                let mut mb = ModelBalancer::new(
                    tower::discover::ServiceList::new(backends),
                    BalanceConfig::default(),
                )
                .unwrap();
                drive(&mut mb, &s, 20 * 1024).await;
                drive(&mut mb, &s, iters).await
            })
            .await
            .unwrap()
        });
        if std::env::args().nth(2).is_some() {
            best_mb = best_mb.min(mb.as_nanos() as f64 / iters as f64);
            continue;
        }
        let s = seq.clone();
        let p = rt.block_on(async move {
            tokio::spawn(async move {
                let mut b = tower::balance::p2c::Balance::new(tower::load::PeakEwmaDiscover::new(
                    tower::discover::ServiceList::new(vec![ready::Ready; n]),
                    Duration::from_millis(30),
                    Duration::from_secs(10),
                    tower::load::CompleteOnResponse::default(),
                ));
                drive(&mut b, &s, 20 * 1024).await;
                drive(&mut b, &s, iters).await
            })
            .await
            .unwrap()
        });
        best_mb = best_mb.min(mb.as_nanos() as f64 / iters as f64);
        best_p2c = best_p2c.min(p.as_nanos() as f64 / iters as f64);
    }
    println!(
        "N={n} mb {best_mb:.1} p2c {best_p2c:.1} ratio {:.3}",
        best_mb / best_p2c
    );
}
