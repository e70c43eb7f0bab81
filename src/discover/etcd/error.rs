//! What a registration's calls to etcd can fail with.

use std::fmt;

use super::record::RecordError;
use crate::error::{BoxError, InvalidConfig};

/// Why a [`Registration`](super::Registration) call failed.
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
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(invalid) => write!(f, "invalid etcd registration: {invalid}"),
            Self::Record(error) => error.fmt(f),
            Self::Client(error) => write!(f, "etcd request failed: {error}"),
        }
    }
}

impl std::error::Error for EtcdError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(invalid) => Some(invalid),
            Self::Record(error) => Some(error),
            Self::Client(error) => Some(&**error),
        }
    }
}

impl From<etcd_client::Error> for EtcdError {
    fn from(error: etcd_client::Error) -> Self {
        Self::Client(Box::new(error))
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
