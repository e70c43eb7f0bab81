//! The model lists the simulated server answers: Triton's repository index
//! and the OpenAI model list (see [`protocol`](super::protocol)).

use tokio::time::Instant;

use super::protocol::json_escape;
use super::residency::Residency;

/// The resident models, sorted by name, each with whether it is loaded.
fn sorted_states(residency: &Residency, now: Instant) -> Vec<(&str, bool)> {
    let mut states: Vec<(&str, bool)> = residency.states(now).collect();
    states.sort_unstable();
    states
}

/// `POST /v2/repository/index`: resident models (`READY`, or `LOADING`
/// while their load is in progress), then evicted ones (`UNAVAILABLE`).
pub(crate) fn index_body(residency: &Residency, now: Instant) -> String {
    let resident = sorted_states(residency, now)
        .into_iter()
        .map(|(model, loaded)| (model, if loaded { "READY" } else { "LOADING" }, ""));
    let evicted = residency
        .evicted()
        .map(|model| (model, "UNAVAILABLE", "unloaded"));
    let entries: Vec<String> = resident
        .chain(evicted)
        .map(|(model, state, reason)| {
            format!(
                r#"{{"name":"{}","version":"1","state":"{state}","reason":"{reason}"}}"#,
                json_escape(model)
            )
        })
        .collect();
    format!("[{}]", entries.join(","))
}

/// `GET /v1/models`: the loaded models as an OpenAI model list.
pub(crate) fn models_body(residency: &Residency, now: Instant) -> String {
    let data: Vec<String> = sorted_states(residency, now)
        .into_iter()
        .filter(|&(_, loaded)| loaded)
        .map(|(model, _)| {
            format!(
                r#"{{"id":"{}","object":"model","created":0,"owned_by":"sim"}}"#,
                json_escape(model)
            )
        })
        .collect();
    format!(r#"{{"object":"list","data":[{}]}}"#, data.join(","))
}

/// The models loaded and ready at `now` (not those still loading), sorted
/// and comma-separated.
pub(crate) fn resident_list(residency: &Residency, now: Instant) -> String {
    let models: Vec<&str> = sorted_states(residency, now)
        .into_iter()
        .filter(|&(_, loaded)| loaded)
        .map(|(model, _)| model)
        .collect();
    models.join(",")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn lists_of_resident_loading_and_evicted_models() {
        let t0 = Instant::now();
        let load = Duration::from_millis(100);
        let mut r = Residency::new(2);
        r.access("b", t0, load);
        r.access("a", t0 + Duration::from_millis(1), load);
        let t1 = t0 + Duration::from_millis(200);
        r.access("c\"d", t1, load);
        assert_eq!(
            index_body(&r, t1),
            concat!(
                r#"[{"name":"a","version":"1","state":"READY","reason":""},"#,
                r#"{"name":"c\"d","version":"1","state":"LOADING","reason":""},"#,
                r#"{"name":"b","version":"1","state":"UNAVAILABLE","reason":"unloaded"}]"#
            )
        );
        assert_eq!(
            models_body(&r, t1),
            r#"{"object":"list","data":[{"id":"a","object":"model","created":0,"owned_by":"sim"}]}"#
        );
        assert_eq!(resident_list(&r, t1), "a", "c\"d is still loading");
        let empty = Residency::new(1);
        assert_eq!(index_body(&empty, t0), "[]");
        assert_eq!(models_body(&empty, t0), r#"{"object":"list","data":[]}"#);
    }
}
