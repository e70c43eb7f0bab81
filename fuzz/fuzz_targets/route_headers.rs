//! Route info from arbitrary headers: `RouteInfo::from_headers` /
//! `from_request` against a reference reading, and `ModelFromBodyLayer`
//! passing a header route on untouched.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_model_balance_test_support::fuzz_route::*;

fuzz_target!(|data: &[u8]| {
    check_headers(&headers_from_bytes(data));
});
