//! `StackConfig::from_toml` on arbitrary text: typed errors naming a real
//! key of a section the text wrote, never a panic.
#![no_main]

#[path = "../../tests/support/fuzz_config.rs"]
mod fuzz_config;

use fuzz_config::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check_config(&config_from_bytes(data));
});
