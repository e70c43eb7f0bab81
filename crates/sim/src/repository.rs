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

/// `POST /v2/repository/index`. Without a repository list: resident
/// models (`READY`, or `LOADING` while their load is in progress), then
/// evicted ones (`UNAVAILABLE`). With one: its models, sorted, each
/// `READY`, `LOADING`, `UNAVAILABLE` (evicted or unloaded) or with its
/// name alone (never loaded, as Triton lists them). `ready_only`: the
/// `READY` ones alone.
pub(crate) fn index_body(
    residency: &Residency,
    now: Instant,
    repository: Option<&[String]>,
    ready_only: bool,
) -> String {
    let resident = sorted_states(residency, now);
    let state_of = |loaded| if loaded { "READY" } else { "LOADING" };
    let entries: Vec<(&str, Option<(&str, &str)>)> = match repository {
        None => resident
            .iter()
            .map(|&(model, loaded)| (model, Some((state_of(loaded), ""))))
            .chain(
                residency
                    .evicted()
                    .map(|model| (model, Some(("UNAVAILABLE", "unloaded")))),
            )
            .collect(),
        Some(models) => models
            .iter()
            .map(|model| {
                let state = match resident.iter().find(|(m, _)| m == model) {
                    Some(&(_, loaded)) => Some((state_of(loaded), "")),
                    None if residency.evicted().any(|m| m == model) => {
                        Some(("UNAVAILABLE", "unloaded"))
                    }
                    None => None,
                };
                (model.as_str(), state)
            })
            .collect(),
    };
    let entries: Vec<String> = entries
        .into_iter()
        .filter(|(_, state)| !ready_only || matches!(state, Some(("READY", _))))
        .map(|(model, state)| match state {
            Some((state, reason)) => format!(
                r#"{{"name":"{}","version":"1","state":"{state}","reason":"{reason}"}}"#,
                json_escape(model)
            ),
            None => format!(r#"{{"name":"{}"}}"#, json_escape(model)),
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
            index_body(&r, t1, None, false),
            concat!(
                r#"[{"name":"a","version":"1","state":"READY","reason":""},"#,
                r#"{"name":"c\"d","version":"1","state":"LOADING","reason":""},"#,
                r#"{"name":"b","version":"1","state":"UNAVAILABLE","reason":"unloaded"}]"#
            )
        );
        assert_eq!(
            index_body(&r, t1, None, true),
            r#"[{"name":"a","version":"1","state":"READY","reason":""}]"#
        );
        let repository = ["a", "b", "c\"d", "e"].map(String::from);
        assert_eq!(
            index_body(&r, t1, Some(&repository), false),
            concat!(
                r#"[{"name":"a","version":"1","state":"READY","reason":""},"#,
                r#"{"name":"b","version":"1","state":"UNAVAILABLE","reason":"unloaded"},"#,
                r#"{"name":"c\"d","version":"1","state":"LOADING","reason":""},"#,
                r#"{"name":"e"}]"#
            )
        );
        assert_eq!(
            index_body(&r, t1, Some(&repository), true),
            r#"[{"name":"a","version":"1","state":"READY","reason":""}]"#
        );
        assert_eq!(
            models_body(&r, t1),
            r#"{"object":"list","data":[{"id":"a","object":"model","created":0,"owned_by":"sim"}]}"#
        );
        assert_eq!(resident_list(&r, t1), "a", "c\"d is still loading");
        let empty = Residency::new(1);
        assert_eq!(index_body(&empty, t0, None, false), "[]");
        assert_eq!(models_body(&empty, t0), r#"{"object":"list","data":[]}"#);
    }
}
