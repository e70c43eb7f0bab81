//! A hostname re-resolved on an interval.

mod builder;
mod resolve;
mod source;

pub use self::builder::DnsBuilder;
pub use self::resolve::{HickoryResolver, Resolve, SystemConfError};
pub use self::source::Dns;
