//! The KServe v2 path form through `ModelFromBodyLayer`: names percent-
//! decoded and validated, the body passed on unparsed, other paths read
//! from the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_model_balance_test_support::fuzz_body::*;

fuzz_target!(|data: &[u8]| {
    check_path(&path_from_bytes(data));
});
