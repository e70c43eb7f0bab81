//! What the crate reads from outside: the stack's TOML file (admission,
//! hedge), the model in a request body, and the fuzz targets' inputs as
//! proptest cases.

mod fuzz_inputs;
mod route_body;
mod stack;
mod stack_admission;
mod stack_hedge;
mod stack_integers;
mod stack_layers;

// This binary's own support, shared by the modules above.
mod fuzz_toml;

// The workspace's shared test harness (`crates/test-support`), named
// here so that the modules above name its modules by `crate::`.
use tower_model_balance_test_support::{fuzz_body, fuzz_config, fuzz_layer, fuzz_route};
