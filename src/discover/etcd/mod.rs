//! Membership and residency from etcd (feature `etcd`): a discovery source
//! watching a key prefix, and the registration of backends under leases.
//!
//! ```
//! use tower_model_balance::backend::{BackendId, BackendMeta};
//! use tower_model_balance::discover::etcd::{decode_record, encode_record, Etcd};
//! use tower_model_balance::endpoint::Origin;
//! use tower_model_balance::route::ModelId;
//!
//! # fn main() -> Result<(), tower::BoxError> {
//! // What a backend (or its sidecar) writes under `<prefix><id>`:
//! let gpu0 = BackendMeta::new(BackendId::new("gpu-0")?)
//!     .with_address(Origin::parse("http://10.0.0.7:8000")?)
//!     .with_resident_models([ModelId::new("llama-3-8b")?]);
//! let value = encode_record(&gpu0)?;
//! assert_eq!(
//!     value,
//!     r#"{"version":1,"address":"http://10.0.0.7:8000","weight":1,"model_slots":4,"models":["llama-3-8b"]}"#
//! );
//! // What every gateway replica reads back.
//! assert_eq!(decode_record(BackendId::new("gpu-0")?, value.as_bytes())?, gpu0);
//!
//! // A source is checked when built; it connects when first polled.
//! let bad = Etcd::builder(["http://127.0.0.1:2379"], "").build(|_: &Origin| ());
//! assert_eq!(bad.unwrap_err().field, "prefix");
//! # Ok(()) }
//! ```
//!
//! Every gateway replica that watches the same prefix with the same
//! balancer configuration (seed, vnodes, weights) computes the same owners
//! for every model: the ring is a function of the membership, and etcd
//! gives every watcher the same history in the same order. Behind the
//! source ([`Etcd`]):
//!
//! * **a consistent start**: a range read of the prefix, paged, every page
//!   at the first page's revision;
//! * **a watch from the revision after it**, which yields a `Change` per
//!   put (an `Insert`, when the record differs from the one announced) and
//!   per delete or lease expiry (a `Remove`);
//! * **a resume after every break** (connection lost, etcd restarted, the
//!   watch cancelled) from the revision after the last applied, so no
//!   change is missed or replayed ([`EtcdStats::stale_events`] checks
//!   the second);
//! * **a fresh snapshot after a compaction** (the resume's revision is
//!   gone), diffed against what was announced: only real differences are
//!   yielded, so the fleet does not flap.
//!
//! A value that does not decode ([`RecordError`]) is skipped, logged and
//! counted, and that backend is out of the fleet until its record is valid:
//! the fleet is a function of the store's records alone, so a replica that
//! has watched for a day and one started a second ago agree. With an
//! allow-list ([`EtcdBuilder::allow`]), a record naming an address outside
//! it is refused the same way. [`EtcdAccess`] reaches an etcd with TLS
//! (feature `etcd-tls`) and users. [`Registration`] is the
//! writer's side: a record under a lease that is kept alive, so a backend
//! that dies leaves every replica's ring at most a TTL after its last
//! renewal (plus etcd's expiry check, every 500 ms).

mod access;
mod allow;
mod builder;
mod connect;
mod counters;
mod error;
mod members;
mod record;
mod register;
mod source;
mod task;

pub use self::access::EtcdAccess;
pub use self::builder::EtcdBuilder;
pub use self::counters::{EtcdHandle, EtcdStats};
pub use self::error::EtcdError;
pub use self::record::{decode_record, encode_record, RecordError, SCHEMA_VERSION};
pub use self::register::{Registration, RegistrationBuilder};
pub use self::source::Etcd;
