//! The flags of TLS and trust: the `https://` backends' CA, and etcd's
//! CA, client certificate, user, password file and allow-list.

use std::net::IpAddr;
use std::path::PathBuf;

use tower_model_balance::endpoint::Origin;

use crate::app::EtcdMembers;
use crate::cli::Stop;

/// What the trust flags say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trust {
    /// `--backend-ca`.
    pub backend_ca: Option<PathBuf>,
    /// `--etcd-ca`.
    pub etcd_ca: Option<PathBuf>,
    /// `--etcd-cert`.
    pub etcd_cert: Option<PathBuf>,
    /// `--etcd-key`.
    pub etcd_key: Option<PathBuf>,
    /// `--etcd-user`.
    pub etcd_user: Option<String>,
    /// `--etcd-password-file`.
    pub etcd_password_file: Option<PathBuf>,
    /// `--etcd-allow`s, in order.
    pub etcd_allow: Vec<String>,
}

impl Trust {
    /// Reads `flag`'s `value` (`--backend-ca`, `--etcd-ca`, `--etcd-cert`,
    /// `--etcd-key`, `--etcd-user`, `--etcd-password-file` or
    /// `--etcd-allow`).
    pub(crate) fn parse(&mut self, flag: &str, value: String) -> Result<(), Stop> {
        let path = || {
            if value.is_empty() {
                Err(Stop::Error(format!("{flag} needs a file")))
            } else {
                Ok(Some(PathBuf::from(&value)))
            }
        };
        match flag {
            "--backend-ca" => self.backend_ca = path()?,
            "--etcd-ca" => self.etcd_ca = path()?,
            "--etcd-cert" => self.etcd_cert = path()?,
            "--etcd-key" => self.etcd_key = path()?,
            "--etcd-password-file" => self.etcd_password_file = path()?,
            "--etcd-user" => {
                if value.is_empty() || value.chars().any(char::is_control) {
                    return Err(Stop::Error(format!(
                        "--etcd-user: `{}` is not a user name",
                        value.escape_debug()
                    )));
                }
                self.etcd_user = Some(value);
            }
            _ => {
                if !is_range(&value) {
                    return Err(Stop::Error(format!(
                        "--etcd-allow: `{value}` is not an address range such as 10.0.0.0/8 or fd00::/8 (or one address)"
                    )));
                }
                self.etcd_allow.push(value);
            }
        }
        Ok(())
    }

    /// Checks the flags against the etcd endpoints given (none: no
    /// `--etcd`).
    pub(crate) fn check(&self, etcd: &[Origin]) -> Result<(), Stop> {
        let etcd_flags = [
            (self.etcd_ca.is_some(), "--etcd-ca"),
            (self.etcd_cert.is_some(), "--etcd-cert"),
            (self.etcd_key.is_some(), "--etcd-key"),
            (self.etcd_user.is_some(), "--etcd-user"),
            (self.etcd_password_file.is_some(), "--etcd-password-file"),
            (!self.etcd_allow.is_empty(), "--etcd-allow"),
        ];
        if etcd.is_empty() {
            if let Some((_, flag)) = etcd_flags.iter().find(|(given, _)| *given) {
                return Err(Stop::Error(format!("{flag} goes with --etcd")));
            }
            return Ok(());
        }
        let https = etcd
            .iter()
            .filter(|e| e.scheme() == &http::uri::Scheme::HTTPS)
            .count();
        if https > 0 && https < etcd.len() {
            return Err(Stop::Error("--etcd: all http:// or all https://".into()));
        }
        let tls = self.etcd_ca.is_some() || self.etcd_cert.is_some() || self.etcd_key.is_some();
        if tls && https == 0 {
            return Err(Stop::Error(
                "--etcd-ca, --etcd-cert and --etcd-key need https:// --etcd URLs".into(),
            ));
        }
        if self.etcd_cert.is_some() != self.etcd_key.is_some() {
            return Err(Stop::Error("--etcd-cert and --etcd-key go together".into()));
        }
        if self.etcd_password_file.is_some() && self.etcd_user.is_none() {
            return Err(Stop::Error(
                "--etcd-password-file goes with --etcd-user".into(),
            ));
        }
        Ok(())
    }

    /// `members` with these settings.
    pub(crate) fn apply(&self, members: &mut EtcdMembers) {
        members.ca.clone_from(&self.etcd_ca);
        if let (Some(cert), Some(key)) = (&self.etcd_cert, &self.etcd_key) {
            members.client_identity = Some((cert.clone(), key.clone()));
        }
        members.user.clone_from(&self.etcd_user);
        members.password_file.clone_from(&self.etcd_password_file);
        members.allow.clone_from(&self.etcd_allow);
    }
}

/// `10.0.0.0/8`, `fd00::/8` or `10.0.0.7`.
fn is_range(text: &str) -> bool {
    let (address, bits) = match text.split_once('/') {
        Some((address, bits)) => (address, Some(bits)),
        None => (text, None),
    };
    let Ok(address) = address.parse::<IpAddr>() else {
        return false;
    };
    let max = if address.is_ipv4() { 32 } else { 128 };
    bits.is_none_or(|bits| bits.parse::<u8>().is_ok_and(|b| b <= max))
}
