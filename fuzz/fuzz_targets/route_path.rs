//! The KServe v2 path form through `ModelFromBodyLayer`: names percent-
//! decoded and validated, the body passed on unparsed, other paths read
//! from the body.
#![no_main]

#[path = "../../tests/support/fuzz_body.rs"]
mod fuzz_body;
#[path = "../../tests/support/fuzz_layer.rs"]
mod fuzz_layer;

use fuzz_body::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check_path(&path_from_bytes(data));
});
