use futures_util::stream;
use tower::discover::Change;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::*;
use tower_model_balance::route::{ModelId, RouteInfo};

#[tokio::test(start_paused = true)]
async fn debug() {
    let backends = (0..8u32).map(|i| {
        let id = BackendId::new(&format!("gpu-{i}")).unwrap();
        Ok::<_, std::convert::Infallible>(Change::Insert(i, Backend::new(id, i)))
    });
    let adm = AdmissionConfig::builder(Limit::fixed(64)).build().unwrap();
    let config = BalanceConfig::builder().admission(adm).build().unwrap();
    let mut b = ModelBalancer::new(stream::iter(backends), config).unwrap();
    let mut held = Vec::new();
    for i in 0..200 {
        let route = RouteInfo::new(ModelId::new(&format!("model-{}", i % 32)).unwrap());
        match b.pick(&route, tokio::time::Instant::now()) {
            Ok(p) => held.push(p),
            Err(e) => panic!(
                "request {i}: {e}; in flight {:?}",
                b.handle()
                    .backends()
                    .iter()
                    .map(|b| b.in_flight)
                    .collect::<Vec<_>>()
            ),
        }
    }
}
