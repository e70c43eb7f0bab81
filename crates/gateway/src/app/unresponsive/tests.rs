//! The unresponsive-backend rule and the backends reached, without IO.

use super::*;
use ProbeOutcome::{Answered, Failed, TimedOut};

fn at(port: u16) -> Origin {
    Origin::http(([127, 0, 0, 1], port).into())
}

#[test]
fn a_cut_names_its_backend_once_a_probe_named_it() {
    let fleet = Unresponsive::new(Duration::from_secs(10));
    let watched = fleet.watch(&at(1)).watched();
    assert_eq!(watched.backend(), None);
    let id = BackendId::new("vllm-0").unwrap();
    fleet.note(&id, &at(1), Answered, Instant::now());
    assert_eq!(watched.backend(), Some(id));
}

/// Notes of a fleet, a second apart.
struct Probes {
    fleet: Unresponsive,
    now: Instant,
    id: BackendId,
}

impl Probes {
    fn new() -> Self {
        Self {
            fleet: Unresponsive::new(Duration::from_secs(2)),
            now: Instant::now(),
            id: BackendId::new("b").unwrap(),
        }
    }

    fn note(&mut self, origin: &Origin, outcome: ProbeOutcome) -> bool {
        self.now += Duration::from_secs(1);
        self.fleet.note(&self.id, origin, outcome, self.now)
    }
}

#[test]
fn cut_after_the_third_unanswered_probe_while_a_peer_answers() {
    let mut probes = Probes::new();
    let (hung, peer) = (at(1), at(2));
    let mut seen = probes.fleet.watch(&hung).changed;
    // Rounds: each backend probed once.
    for round in 1..=2 {
        assert!(!probes.note(&hung, TimedOut), "round {round}");
        probes.note(&peer, Answered);
    }
    assert!(!seen.has_changed().unwrap());
    assert!(probes.note(&hung, TimedOut), "the third in a row");
    assert!(seen.has_changed().unwrap());
    seen.borrow_and_update();
    // Each one after cuts again (requests sent to it since).
    probes.note(&peer, Answered);
    assert!(probes.note(&hung, TimedOut));
    assert!(seen.has_changed().unwrap());
}

#[test]
fn the_run_must_last_its_time_and_zero_never_cuts() {
    let mut probes = Probes::new();
    let (hung, peer) = (at(1), at(2));
    // Three unanswered probes within 2 s (a second apart: the third 2 s
    // after the first) cut; a fleet whose rule is off never does.
    let off = Unresponsive::new(Duration::ZERO);
    for n in 1..=6 {
        probes.note(&peer, Answered);
        off.note(&probes.id, &peer, Answered, probes.now);
        let cut = probes.note(&hung, TimedOut);
        assert!(!off.note(&probes.id, &hung, TimedOut, probes.now));
        // Notes at 2 s, 4 s, 6 s…: the third lasted 4 s.
        assert_eq!(cut, n >= 3, "probe {n}");
    }
    let mut slow = Probes::new();
    slow.fleet = Unresponsive::new(Duration::from_secs(9));
    let cuts: Vec<bool> = (0..6)
        .map(|_| {
            slow.note(&peer, Answered);
            slow.note(&hung, TimedOut)
        })
        .collect();
    // The first at 2 s, then 4, 6, 8, 10 (lasted 8), 12 (lasted 10).
    assert_eq!(cuts, [false, false, false, false, false, true]);
}

#[test]
fn an_answer_or_a_failed_connection_ends_the_run() {
    let mut probes = Probes::new();
    let (hung, peer) = (at(1), at(2));
    for end in [Answered, Failed] {
        probes.note(&hung, TimedOut);
        probes.note(&hung, TimedOut);
        probes.note(&hung, end);
        probes.note(&peer, Answered);
        assert!(!probes.note(&hung, TimedOut), "after {end:?}");
        probes.note(&hung, Answered);
    }
}

#[test]
fn no_cut_unless_a_peer_answered_during_the_silence() {
    let mut probes = Probes::new();
    let (a, b) = (at(1), at(2));
    // A lone backend.
    for _ in 0..5 {
        assert!(!probes.note(&a, TimedOut));
    }
    probes.note(&a, Answered);
    // A peer that answered before the silence began, then went quiet
    // (or was removed from the fleet): no cut.
    probes.note(&b, Answered);
    for _ in 0..5 {
        assert!(!probes.note(&a, TimedOut));
        probes.note(&b, TimedOut);
    }
    probes.note(&b, Answered);
    assert!(probes.note(&a, TimedOut), "the peer answers again");
}

#[test]
fn a_backend_is_reached_by_an_answer_and_stays_reached() {
    let mut probes = Probes::new();
    let b = at(1);
    let _cuts = probes.fleet.watch(&b);
    probes.note(&b, Failed);
    probes.note(&b, TimedOut);
    assert!(!probes.fleet.reached(&probes.id), "never answered");
    probes.note(&b, Answered);
    probes.note(&b, Failed);
    probes.note(&b, TimedOut);
    assert!(probes.fleet.reached(&probes.id), "undone by probes failing");
    // With placement a probe does not reach it; its repository's read does.
    let placing = Unresponsive::new(Duration::ZERO).probes_reach(false);
    placing.note(&probes.id, &b, Answered, probes.now);
    assert!(!placing.reached(&probes.id), "reached by a probe");
    placing.note_reached(&probes.id, &b);
    assert!(placing.reached(&probes.id));
    // A response head (the endpoint's note) reaches it too.
    let fleet = Unresponsive::new(Duration::ZERO);
    fleet.note(&probes.id, &at(2), Failed, probes.now);
    fleet.watch(&at(2)).watched().reached().note();
    assert!(fleet.reached(&probes.id));
}
