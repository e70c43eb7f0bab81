//! The address ranges an etcd source's records may name (pure logic): a
//! record whose address, or metrics address, is outside them is refused as
//! an invalid record, so that whoever can write under the prefix cannot
//! have prompts (or probes) sent to a host of their choosing.

use std::net::IpAddr;

use ipnet::IpNet;

use super::record::RecordError;
use crate::backend::BackendMeta;
use crate::endpoint::Origin;
use crate::error::InvalidConfig;

/// Address ranges; empty allows any address, names included.
#[derive(Debug, Clone, Default)]
pub(super) struct AllowList {
    ranges: Vec<IpNet>,
}

impl AllowList {
    /// The ranges in `texts`: CIDR (`10.0.0.0/8`, `fd00::/8`) or single
    /// addresses (`10.0.0.7`).
    pub(super) fn parse(texts: &[String]) -> Result<Self, InvalidConfig> {
        let ranges = texts
            .iter()
            .map(|text| {
                let text = text.trim();
                text.parse::<IpNet>()
                    .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                    .map(|net| net.trunc())
            })
            .collect::<Result<_, _>>()
            .map_err(|_| {
                InvalidConfig::new(
                    "allow",
                    "address ranges in CIDR notation (10.0.0.0/8, fd00::/8) or single addresses",
                )
            })?;
        Ok(Self { ranges })
    }

    /// Whether any range is set.
    pub(super) fn is_on(&self) -> bool {
        !self.ranges.is_empty()
    }

    /// Refuses a record whose address or metrics address is not an IP
    /// address in a range. A host name is refused too: what it resolves
    /// to is not known here, and may change after the check.
    pub(super) fn check(&self, meta: &BackendMeta) -> Result<(), RecordError> {
        if !self.is_on() {
            return Ok(());
        }
        let origins = meta.address().into_iter().chain(meta.metrics_address());
        for origin in origins {
            if !self.allows(origin) {
                return Err(RecordError::NotAllowed(origin.to_string()));
            }
        }
        Ok(())
    }

    fn allows(&self, origin: &Origin) -> bool {
        let host = origin.authority().host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let Ok(address) = host.parse::<IpAddr>() else {
            return false;
        };
        // `::ffff:10.0.0.7` is 10.0.0.7.
        let address = address.to_canonical();
        self.ranges.iter().any(|range| range.contains(&address))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendId;

    fn meta(address: &str, metrics: Option<&str>) -> BackendMeta {
        let meta = BackendMeta::new(BackendId::new("b").unwrap())
            .with_address(Origin::parse(address).unwrap());
        match metrics {
            Some(m) => meta.with_metrics_address(Origin::parse(m).unwrap()),
            None => meta,
        }
    }

    fn list(ranges: &[&str]) -> AllowList {
        let ranges: Vec<String> = ranges.iter().map(|r| (*r).to_owned()).collect();
        AllowList::parse(&ranges).unwrap()
    }

    #[test]
    fn addresses_in_a_range_pass_and_others_are_refused() {
        let allow = list(&["10.0.0.0/8", "fd00::/8", "192.168.1.7"]);
        for ok in [
            "http://10.1.2.3:8000",
            "https://[fd00::1]:443",
            "http://192.168.1.7:80",
            "http://[::ffff:10.0.0.9]:80",
        ] {
            assert_eq!(allow.check(&meta(ok, None)), Ok(()), "{ok}");
        }
        for refused in [
            "http://11.0.0.1:8000",
            "http://192.168.1.8:80",
            "http://[fe80::1]:80",
            "http://attacker.example:80",
            "http://localhost:80",
        ] {
            let error = allow.check(&meta(refused, None)).unwrap_err();
            assert!(matches!(&error, RecordError::NotAllowed(a) if a == refused));
            assert!(error.to_string().contains(refused), "{error}");
        }
        // The metrics address is checked too: probes are sent there.
        let outside = meta("http://10.0.0.1:80", Some("http://8.8.8.8:80"));
        assert!(allow.check(&outside).is_err());
        // No ranges: anything goes (etcd is trusted).
        assert_eq!(list(&[]).check(&meta("http://h:1", None)), Ok(()));
    }

    #[test]
    fn a_bad_range_names_the_field() {
        for bad in ["10.0.0.0/33", "ten", "", "10.0.0.0/8/8"] {
            let error = AllowList::parse(&[bad.to_owned()]).unwrap_err();
            assert_eq!(error.field, "allow", "{bad}");
        }
    }
}
