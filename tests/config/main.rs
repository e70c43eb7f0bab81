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

// Support shared by the modules above, each file once (the support
// files name one another by `crate::`).
#[path = "../support/fuzz_body.rs"]
mod fuzz_body;
#[path = "../support/fuzz_config.rs"]
mod fuzz_config;
#[path = "../support/fuzz_layer.rs"]
mod fuzz_layer;
#[path = "../support/fuzz_route.rs"]
mod fuzz_route;
#[allow(dead_code)]
#[path = "../support/fuzz_toml.rs"]
mod fuzz_toml;
