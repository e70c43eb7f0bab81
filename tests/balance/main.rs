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

// Support shared by the modules above, each file once (the support
// files name one another by `crate::`).
#[allow(dead_code)]
#[path = "../support/admission.rs"]
mod admission;
#[allow(dead_code)]
#[path = "../support/balancer_fleet.rs"]
mod balancer_fleet;
#[allow(dead_code)]
#[path = "../support/chaos_episode.rs"]
mod chaos_episode;
#[allow(dead_code)]
#[path = "../support/chaos_log.rs"]
mod chaos_log;
#[allow(dead_code)]
#[path = "../support/chaos_script.rs"]
mod chaos_script;
#[allow(dead_code)]
#[path = "../support/chaos_stack.rs"]
mod chaos_stack;
#[allow(dead_code)]
#[path = "../support/held.rs"]
mod held;
#[allow(dead_code)]
#[path = "../support/lcg.rs"]
mod lcg;
#[allow(dead_code)]
#[path = "../support/paused_picks.rs"]
mod paused_picks;
#[allow(dead_code)]
#[path = "../support/pick_api.rs"]
mod pick_api;
#[allow(dead_code)]
#[path = "../support/placement_fleet.rs"]
mod placement_fleet;
#[allow(dead_code)]
#[path = "../support/sim_balancer.rs"]
mod sim_balancer;
#[allow(dead_code)]
#[path = "../support/until.rs"]
mod until;
