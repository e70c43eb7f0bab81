//! Connecting to etcd, shared by the source and the registration: the
//! endpoints, the timeouts, the reconnect backoff.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::access::EtcdAccess;
use super::allow::AllowList;
use crate::error::InvalidConfig;

/// Where etcd is and how to reach it.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) endpoints: Vec<String>,
    pub(super) prefix: Vec<u8>,
    pub(super) timeout: Duration,
    pub(super) backoff_min: Duration,
    pub(super) backoff_max: Duration,
    /// The user and TLS settings.
    pub(super) access: EtcdAccess,
    /// The address ranges a record may name (a source's; empty: any).
    pub(super) allow: AllowList,
}

impl Settings {
    /// Default [`Settings::timeout`]: connecting, and each request but a
    /// watch's stream.
    pub(super) const TIMEOUT: Duration = Duration::from_secs(5);

    pub(super) fn new(endpoints: Vec<String>, prefix: String) -> Self {
        Self {
            endpoints,
            prefix: prefix.into_bytes(),
            timeout: Self::TIMEOUT,
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            access: EtcdAccess::default(),
            allow: AllowList::default(),
        }
    }

    /// Checks what a builder was given.
    pub(super) fn validate(&self) -> Result<(), InvalidConfig> {
        let plain =
            |s: &str| !s.is_empty() && s.len() <= 2048 && !s.chars().any(char::is_whitespace);
        if self.endpoints.is_empty() || !self.endpoints.iter().all(|e| plain(e)) {
            return Err(InvalidConfig::new(
                "endpoints",
                "one or more etcd client URLs (http://host:port), without whitespace",
            ));
        }
        let prefix_ok = !self.prefix.is_empty()
            && self.prefix.len() <= 1024
            && !self.prefix.iter().any(|b| b.is_ascii_control());
        if !prefix_ok {
            return Err(InvalidConfig::new(
                "prefix",
                "1 to 1024 bytes without control characters",
            ));
        }
        let backoff_ok = !self.backoff_min.is_zero()
            && self.backoff_min <= self.backoff_max
            && self.backoff_max <= Duration::from_secs(300);
        if !backoff_ok {
            return Err(InvalidConfig::new("backoff", "0 < min <= max <= 300 s"));
        }
        if self.timeout.is_zero() || self.timeout > Duration::from_secs(300) {
            return Err(InvalidConfig::new("timeout", "above 0, up to 300 s"));
        }
        self.access.validate(&self.endpoints)?;
        if self.access.user_over_http(&self.endpoints) {
            tracing::warn!(
                "etcd: a user's password sent over http://, in the clear: give https:// endpoints"
            );
        }
        Ok(())
    }

    /// A client of endpoint `i` alone (modulo their number): the client
    /// crate's own balancing over several sends a call to a dead member as
    /// readily as to a live one, so callers move to the next endpoint when
    /// one fails. The connection is made at the first call. HTTP/2
    /// keep-alive pings (every 10 s, 5 s to answer, idle or not) find a
    /// connection that died without a reset, and a watch needs the member
    /// it is on to have a leader.
    pub(super) async fn connect(&self, i: usize) -> Result<Client, etcd_client::Error> {
        let options = ConnectOptions::new()
            .with_connect_timeout(self.timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        let endpoint = &self.endpoints[i % self.endpoints.len()];
        let options = self.access.apply(options, endpoint);
        let endpoint = [endpoint];
        within(self.timeout, Client::connect(endpoint, Some(options))).await
    }

    /// The end of the prefix's key range: the prefix with its last byte
    /// below 0xff incremented and what follows cut (etcd's rule; `\0`,
    /// every key from the prefix on, when every byte is 0xff).
    pub(super) fn range_end(&self) -> Vec<u8> {
        let mut end = self.prefix.clone();
        while let Some(last) = end.pop() {
            if last < 0xff {
                end.push(last + 1);
                return end;
            }
        }
        vec![0]
    }
}

/// `call`, failing with a timeout error after `timeout`.
pub(super) async fn within<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, etcd_client::Error> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => Err(etcd_client::Error::IoError(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer from etcd within {} ms", timeout.as_millis()),
        ))),
    }
}

/// Exponential backoff with full jitter (AWS's "Exponential Backoff and
/// Jitter"): the n-th wait is uniform in [min, min(max, min × 2^n)].
#[derive(Debug)]
pub(super) struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
    rng: SmallRng,
}

impl Backoff {
    pub(super) fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            attempt: 0,
            rng: SmallRng::from_entropy(),
        }
    }

    /// The next wait.
    pub(super) fn next_wait(&mut self) -> Duration {
        let cap = self
            .min
            .saturating_mul(1 << self.attempt.min(20))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let span = cap.saturating_sub(self.min);
        self.min + span.mul_f64(self.rng.gen::<f64>())
    }

    /// After a success: the next wait starts from `min` again.
    pub(super) fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(prefix: &str) -> Settings {
        Settings::new(vec!["http://127.0.0.1:2379".into()], prefix.into())
    }

    #[test]
    fn the_range_end_follows_etcd() {
        assert_eq!(settings("/a/").range_end(), b"/a0");
        let mut s = settings("x");
        s.prefix = vec![b'a', 0xff];
        assert_eq!(s.range_end(), b"b");
        s.prefix = vec![0xff, 0xff];
        assert_eq!(s.range_end(), vec![0]);
    }

    #[test]
    fn bad_settings_name_their_field() {
        let field = |s: Settings| s.validate().unwrap_err().field;
        assert_eq!(field(settings("")), "prefix");
        assert_eq!(field(settings("/a\n")), "prefix");
        let mut s = settings("/a/");
        s.endpoints.clear();
        assert_eq!(field(s), "endpoints");
        let mut s = settings("/a/");
        s.endpoints = vec!["http://a b".into()];
        assert_eq!(field(s), "endpoints");
        let mut s = settings("/a/");
        s.backoff_min = Duration::from_secs(2);
        s.backoff_max = Duration::from_secs(1);
        assert_eq!(field(s), "backoff");
        let mut s = settings("/a/");
        s.timeout = Duration::ZERO;
        assert_eq!(field(s), "timeout");
        assert!(settings("/a/").validate().is_ok());
    }

    #[test]
    fn the_backoff_grows_to_its_cap_and_resets() {
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(1));
        let mut backoff = Backoff::new(min, max);
        let mut caps = Vec::new();
        for n in 0..8u32 {
            let wait = backoff.next_wait();
            let cap = (min * 2u32.pow(n)).min(max);
            assert!(
                wait >= min && wait <= cap,
                "{wait:?} outside [{min:?}, {cap:?}]"
            );
            caps.push(cap);
        }
        assert_eq!(caps.last(), Some(&max));
        backoff.reset();
        assert!(backoff.next_wait() == min);
    }
}
