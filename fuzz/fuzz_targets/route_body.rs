//! JSON bodies through `ModelFromBodyLayer` with a limit of 1 to 4096
//! bytes: over it a `PayloadTooLarge`, within it the model agreed with
//! `serde_json` and the body handed on unchanged. Run with `-rss_limit_mb`
//! and `-malloc_limit_mb`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_model_balance_test_support::fuzz_body::*;

fuzz_target!(|data: &[u8]| {
    check_body(&body_from_bytes(data));
});
