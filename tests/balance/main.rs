//! The balancer: admission, affinity, the owner plan and agreement on owners, gRPC,
//! races, the Service and the pick API, a call made before readiness,
//! chaos, hash flooding, loopback fleets, prefix affinity, pair breakers,
//! starvation, P2C's choice at light load, placement, and what it learns
//! from answers.

mod admit;
mod admit_pick;
mod agreement;
mod answers;
mod chaos;
mod duplicate_id;
mod grpc;
mod hash_flood;
mod loopback;
mod not_found;
mod not_ready;
mod owner_plan;
mod p2c_choice;
mod pick;
mod pick_urgency;
mod placement;
mod placement_bounds;
mod placement_gone;
mod prefix_affinity;
mod race;
mod scoped_breaker;
mod service;
mod starvation;
mod starvation_light_load;

// This binary's own support, shared by the modules above.
mod admission;
mod balancer_fleet;
mod chaos_episode;
mod chaos_log;
mod chaos_script;
mod chaos_stack;
mod paused_picks;
mod pick_api;
mod placement_fleet;

// The workspace's shared test harness (`crates/test-support`), named
// here so that the modules above name its modules by `crate::`.
use tower_model_balance_test_support::{held, lcg, sim_balancer, until};
