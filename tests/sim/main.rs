//! The simulated model servers the other tests run against: cold loads,
//! explicit mode, faults, LoRA adapters, the OpenAI API, placement.

mod cold;
mod explicit;
mod faults;
mod lora;
mod openai;
mod placement;

// The workspace's shared test harness (`crates/test-support`), named
// here so that the modules above name its modules by `crate::`.
use tower_model_balance_test_support::{sim_explicit, sim_http};
