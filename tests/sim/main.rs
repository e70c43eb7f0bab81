//! The simulated model servers the other tests run against: cold loads,
//! explicit mode, faults, LoRA adapters, the OpenAI API, placement.

mod cold;
mod explicit;
mod faults;
mod lora;
mod openai;
mod placement;

// Support shared by the modules above, each file once (the support
// files name one another by `crate::`).
#[allow(dead_code)]
#[path = "../support/sim_explicit.rs"]
mod sim_explicit;
#[allow(dead_code)]
#[path = "../support/sim_http.rs"]
mod sim_http;
