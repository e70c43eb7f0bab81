//! Free ports for the real servers the tests start as child processes.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};

/// `N` distinct ports in `from .. from + span` free on 127.0.0.1 a moment
/// ago. Keep the range below Linux's ephemeral range (32768 and up), so
/// that no outgoing connection of this machine takes one before the server
/// binds it, and apart from other servers' ranges. Tried from a place
/// drawn from the process and a counter, each bound until all are found.
pub fn free_ports<const N: usize>(from: u16, span: u16) -> [u16; N] {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let span = u64::from(span);
    let start =
        (u64::from(std::process::id()) * 7919 + NEXT.fetch_add(97, Ordering::Relaxed)) % span;
    let mut held = Vec::new();
    for offset in 0..span {
        let port = from + ((start + offset) % span) as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
            if held.len() == N {
                break;
            }
        }
    }
    let ports: Vec<u16> = held
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect();
    ports
        .try_into()
        .unwrap_or_else(|_| panic!("{N} free ports in {from}..{}", u64::from(from) + span))
}
