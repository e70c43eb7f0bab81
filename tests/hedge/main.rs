//! The hedge: the layer over mock and loopback services, beside the
//! balancer, the documented recipes (axum, tonic), retries from the same
//! budget, first frames, the superseded first attempt, a call made
//! before readiness, and requests marked to be sent once.

mod balance;
mod first_frame;
mod layer;
mod loopback;
mod not_ready;
mod recipe;
mod retry;
mod send_once;
mod supersede;
mod tonic;

// This binary's own support, shared by the modules above.
#[allow(dead_code)]
#[path = "../../examples/tonic_client/client.rs"]
mod client;
#[allow(dead_code)]
#[path = "../../examples/tonic_client/errors.rs"]
mod errors;
mod hedge_script;
#[allow(dead_code)]
#[path = "../../examples/tonic_client/hedged.rs"]
mod hedged;
#[allow(dead_code)]
#[path = "../../examples/tonic_client/kserve.rs"]
mod kserve;
#[allow(dead_code)]
#[path = "../../examples/tonic_client/server.rs"]
mod server;
