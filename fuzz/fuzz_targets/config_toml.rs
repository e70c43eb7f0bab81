//! `StackConfig::from_toml` on arbitrary text: typed errors naming a real
//! key of a section the text wrote, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_model_balance_test_support::fuzz_config::*;

fuzz_target!(|data: &[u8]| {
    check_config(&config_from_bytes(data));
});
