//! The Prometheus text exposition into [`LoadSignals`], in the names a
//! [`MetricNames`] asks for.

use std::borrow::Cow;

use prometheus_parse::{LineInfo, Scrape, Value};

use super::names::{MetricNames, METRICS_PATH};
use crate::health::probe::prober::ProbeError;
use crate::health::signals::LoadSignals;

/// Stands in for `:` in metric names. prometheus-parse 0.2.5 matches names
/// with `\w+`, which has no `:`, so it skips every sample of a name such as
/// `vllm:num_requests_running`. Valid metric names are ASCII, so this
/// non-ASCII letter (U+02D0, a word character) stands for `:` without
/// clashing with any name.
const COLON: &str = "\u{2d0}";

fn escape_name(name: &str) -> String {
    name.replace(':', COLON)
}

/// `line` with the colons of its metric name escaped; labels and values
/// are left alone.
pub(super) fn escape_line(line: &str) -> Cow<'_, str> {
    if !line.contains(':') {
        return Cow::Borrowed(line);
    }
    let trimmed = line.trim_start();
    // `# HELP name doc` and `# TYPE name type`; other comments as they are.
    let (head, rest) = match trimmed.strip_prefix('#') {
        Some(comment) => {
            let body = comment.trim_start();
            let Some(after) = body
                .strip_prefix("HELP")
                .or_else(|| body.strip_prefix("TYPE"))
            else {
                return Cow::Borrowed(line);
            };
            if !after.starts_with(char::is_whitespace) {
                return Cow::Borrowed(line);
            }
            let keyword = &body[..4];
            (format!("# {keyword} "), after.trim_start())
        }
        None => (String::new(), trimmed),
    };
    let end = rest
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(rest.len());
    Cow::Owned(format!(
        "{head}{}{}",
        escape_name(&rest[..end]),
        &rest[end..]
    ))
}

/// The metric a line is about: a sample's name, or the name a `# HELP` or
/// `# TYPE` comment documents; `None` for other comments, blank lines and
/// lines that start with no valid metric name.
fn metric_name(line: &str) -> Option<&str> {
    let line = line.trim_start();
    let rest = match line.strip_prefix('#') {
        Some(comment) => {
            let body = comment.trim_start();
            let after = body
                .strip_prefix("HELP")
                .or_else(|| body.strip_prefix("TYPE"))?;
            if !after.starts_with(char::is_whitespace) {
                return None;
            }
            after.trim_start()
        }
        None => line,
    };
    let end = rest
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(rest.len());
    let name = &rest[..end];
    let valid = name.chars().enumerate().all(|(i, c)| {
        c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
    });
    (!name.is_empty() && valid).then_some(name)
}

/// A sample line without its label block (`name{…} value` is `name
/// value`), quotes and escapes inside label values respected; other lines
/// as they are. An unclosed block is left for the parser to refuse.
fn without_labels(line: &str) -> Cow<'_, str> {
    let trimmed = line.trim_start();
    if trimmed.starts_with('#') {
        return Cow::Borrowed(line);
    }
    let Some(open) = trimmed.find('{') else {
        return Cow::Borrowed(line);
    };
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in trimmed[open..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => {
                let rest = &trimmed[open + i + 1..];
                return Cow::Owned(format!("{}{rest}", &trimmed[..open]));
            }
            _ => {}
        }
    }
    Cow::Borrowed(line)
}

/// Whether `name` is one of `wanted`, or the series of a histogram or
/// summary of one (`_bucket`, `_sum`, `_count`): those are parsed, so that
/// a histogram where a gauge is expected is found out.
fn asked(wanted: &[&str], name: &str) -> bool {
    let base = ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix));
    wanted.contains(&name) || base.is_some_and(|base| wanted.contains(&base))
}

/// Whether a sample line not read ends as a sample does: a value, and
/// maybe a timestamp, after its name and labels.
fn sample_shaped(line: &str) -> bool {
    let mut tokens = line.split_whitespace().rev();
    // A timestamp after the value is a number too.
    let (last, before) = (tokens.next(), tokens.next());
    last.is_some_and(is_number) && before.is_some()
}

fn is_number(value: &str) -> bool {
    value.eq_ignore_ascii_case("nan") || value.parse::<f64>().is_ok()
}

/// Reads `names`' signals from a Prometheus text exposition.
pub(super) fn parse_metrics(body: &[u8], names: &MetricNames) -> Result<LoadSignals, ProbeError> {
    let malformed = |what: String| ProbeError::malformed(format!("{METRICS_PATH}: {what}"));
    let text = std::str::from_utf8(body).map_err(|_| malformed("not UTF-8".into()))?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(malformed(
            "cut short: the last line has no line feed".into(),
        ));
    }
    let wanted = names.all();
    let mut lines = Vec::new();
    for (number, line) in text.lines().enumerate() {
        // Only the metrics asked for are parsed; the others are checked
        // for their shape only (prometheus-parse 0.2.5 rejects label values
        // holding `{` or `}`, as MLServer's `path="/v2/models/{model_name}"`
        // does).
        let valid = match metric_name(line) {
            Some(name) if asked(&wanted, name) => {
                // The series are summed (or averaged) whatever their
                // labels: a gauge's labels are dropped before parsing, so
                // that none can trip the parser.
                let line = match wanted.contains(&name) {
                    true => without_labels(line),
                    false => Cow::Borrowed(line),
                };
                let line = escape_line(&line);
                let valid = match LineInfo::parse(&line) {
                    LineInfo::Sample { value, .. } => is_number(value),
                    LineInfo::Ignored => line.trim_start().starts_with('#'),
                    LineInfo::Doc { .. } | LineInfo::Type { .. } | LineInfo::Empty => true,
                };
                lines.push(Ok(line.into_owned()));
                valid
            }
            Some(_) => line.trim_start().starts_with('#') || sample_shaped(line),
            None => {
                let line = line.trim_start();
                line.is_empty() || line.starts_with('#')
            }
        };
        if !valid {
            return Err(malformed(format!(
                "line {} is neither a comment nor a sample",
                number + 1
            )));
        }
    }
    let scrape = Scrape::parse(lines.into_iter()).map_err(|e| malformed(e.to_string()))?;
    let read = |candidates: &[String], fraction: bool| -> Result<Option<f64>, ProbeError> {
        for name in candidates {
            let escaped = escape_name(name);
            let mut values = Vec::new();
            for sample in scrape.samples.iter().filter(|s| s.metric == escaped) {
                let value = match sample.value {
                    Value::Gauge(v) | Value::Counter(v) | Value::Untyped(v) => v,
                    Value::Histogram(_) | Value::Summary(_) => {
                        return Err(malformed(format!("{name} is not a gauge")));
                    }
                };
                let max = if fraction { 1.0 } else { f64::MAX };
                if !(0.0..=max).contains(&value) {
                    let range = if fraction { "[0, 1]" } else { "[0, ∞)" };
                    return Err(malformed(format!("{name} is {value}, not in {range}")));
                }
                values.push(value);
            }
            if !values.is_empty() {
                let sum: f64 = values.iter().sum();
                return Ok(Some(if fraction {
                    sum / values.len() as f64
                } else {
                    sum
                }));
            }
        }
        Ok(None)
    };
    Ok(LoadSignals {
        kv_cache_usage: read(&names.kv_cache_usage, true)?,
        requests_running: read(&names.requests_running, false)?,
        requests_waiting: read(&names.requests_waiting, false)?,
        gpu_memory_used_bytes: read(&names.gpu_memory_used_bytes, false)?,
        gpu_memory_total_bytes: read(&names.gpu_memory_total_bytes, false)?,
    })
}
