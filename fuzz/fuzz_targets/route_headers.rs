//! Route info from arbitrary headers: `RouteInfo::from_headers` /
//! `from_request` against a reference reading, and `ModelFromBodyLayer`
//! passing a header route on untouched.
#![no_main]

#[path = "../../tests/support/fuzz_layer.rs"]
mod fuzz_layer;
#[path = "../../tests/support/fuzz_route.rs"]
mod fuzz_route;

use fuzz_route::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check_headers(&headers_from_bytes(data));
});
