//! What a registration's calls to etcd can fail with.

use std::fmt;

use super::record::RecordError;
use crate::error::{BoxError, InvalidConfig};

/// Why a [`Registration`](super::Registration) call, or an
/// [`EtcdBuilder::check`](super::EtcdBuilder::check), failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum EtcdError {
    /// A setting out of range (the builder's field and rule).
    Config(InvalidConfig),
    /// The record cannot be written (no address).
    Record(RecordError),
    /// etcd could not be reached, or refused or timed out a request: the
    /// client's error, as its source.
    Client(BoxError),
    /// etcd refused the [user](super::EtcdAccess::user): a wrong name or
    /// password, none given where etcd has auth on, or a user without
    /// permission on the prefix. etcd's answer, as its source.
    Auth(BoxError),
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(invalid) => write!(f, "invalid etcd registration: {invalid}"),
            Self::Record(error) => error.fmt(f),
            Self::Client(error) => write!(f, "etcd request failed: {}", chain(&**error)),
            Self::Auth(error) => write!(f, "etcd refused the user: {error}"),
        }
    }
}

impl std::error::Error for EtcdError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(invalid) => Some(invalid),
            Self::Record(error) => Some(error),
            Self::Client(error) | Self::Auth(error) => Some(&**error),
        }
    }
}

impl From<etcd_client::Error> for EtcdError {
    fn from(error: etcd_client::Error) -> Self {
        if is_auth(&error) {
            Self::Auth(Box::new(error))
        } else {
            Self::Client(Box::new(error))
        }
    }
}

impl From<RecordError> for EtcdError {
    fn from(error: RecordError) -> Self {
        Self::Record(error)
    }
}

impl From<InvalidConfig> for EtcdError {
    fn from(error: InvalidConfig) -> Self {
        Self::Config(error)
    }
}

/// Whether etcd refused the caller: gRPC's `Unauthenticated` or
/// `PermissionDenied`, or etcd's own words for a bad login (it answers a
/// wrong password with `InvalidArgument`).
fn is_auth(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => {
            let message = status.message();
            // tonic's `Code`, by name: this crate does not name tonic.
            let code = format!("{:?}", status.code());
            matches!(code.as_str(), "Unauthenticated" | "PermissionDenied")
                || message.contains("authentication failed")
                || message.contains("user name is empty")
                || message.contains("invalid auth token")
                || message.contains("permission denied")
        }
        _ => false,
    }
}

/// An error and its sources, `: `-separated: a transport error's own text
/// is only "transport error", its cause (a certificate refused, a
/// connection refused) is in its sources.
pub(super) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
