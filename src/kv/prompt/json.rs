//! `tojson` as transformers defines it for chat templates: Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)`, not Jinja's HTML-escaping filter (minijinja's own
//! `tojson` escapes `<`, `>`, `&` and `'`, and writes `,` without the
//! space Python puts after it).

use std::fmt::Write;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// The filter: `value | tojson(indent=…, separators=(…, …), sort_keys=…,
/// ensure_ascii=…)`.
pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => Some(" ".repeat(usize::try_from(v).unwrap_or(0))),
        },
    };
    let separators: Option<Value> = kwargs.get("separators")?;
    let (item, key) = match separators.filter(|v| !v.is_none()) {
        Some(v) => {
            let mut parts = v.try_iter()?.map(|p| p.as_str().map(str::to_owned));
            match (parts.next().flatten(), parts.next().flatten()) {
                (Some(a), Some(b)) => (a, b),
                _ => return Err(Error::new(ErrorKind::InvalidOperation, "separators")),
            }
        }
        None if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        None => (", ".to_owned(), ": ".to_owned()),
    };
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let style = Style {
        indent,
        item,
        key,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    let mut out = String::new();
    style.write(&mut out, value, 0)?;
    Ok(Value::from_safe_string(out))
}

struct Style {
    indent: Option<String>,
    item: String,
    key: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

impl Style {
    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(indent);
            }
        }
    }

    fn write(&self, out: &mut String, value: &Value, depth: usize) -> Result<(), Error> {
        match value.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => number(out, value),
            ValueKind::String | ValueKind::Bytes => {
                self.string(out, value.as_str().unwrap_or_default())
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = value.try_iter()?.collect();
                if keys.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                if self.sort_keys {
                    keys.sort();
                }
                out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item);
                    }
                    self.newline(out, depth + 1);
                    match k.as_str() {
                        Some(s) => self.string(out, s),
                        None => self.string(out, &k.to_string()),
                    }
                    out.push_str(&self.key);
                    self.write(out, &value.get_item(k)?, depth + 1)?;
                }
                self.newline(out, depth);
                out.push('}');
            }
            _ => match value.try_iter() {
                Ok(items) => {
                    let items: Vec<Value> = items.collect();
                    if items.is_empty() {
                        out.push_str("[]");
                        return Ok(());
                    }
                    out.push('[');
                    for (i, v) in items.iter().enumerate() {
                        if i > 0 {
                            out.push_str(&self.item);
                        }
                        self.newline(out, depth + 1);
                        self.write(out, v, depth + 1)?;
                    }
                    self.newline(out, depth);
                    out.push(']');
                }
                Err(_) => self.string(out, &value.to_string()),
            },
        }
        Ok(())
    }

    fn string(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && !c.is_ascii()) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A number as Python's `repr` writes it: integers as they are, floats
/// with a `.0` when whole, exponents as `1e+16` and `1e-07`.
fn number(out: &mut String, value: &Value) {
    if value.is_integer() {
        let _ = write!(out, "{value}");
        return;
    }
    let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else if f == f.trunc() && f.abs() < 1e16 {
        let _ = write!(out, "{f:.1}");
    } else {
        let text = format!("{f:?}");
        match text.split_once('e') {
            Some((mantissa, exp)) => {
                let (sign, digits) = match exp.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', exp),
                };
                let _ = write!(out, "{mantissa}e{sign}{digits:0>2}");
            }
            None => out.push_str(&text),
        }
    }
}

#[cfg(test)]
mod tests {
    use minijinja::{context, Environment};

    fn render(template: &str, x: serde_json::Value) -> String {
        let mut env = Environment::new();
        env.add_filter("tojson", super::tojson);
        env.render_str(template, context! { x }).unwrap()
    }

    #[test]
    fn writes_as_python_json_dumps_does() {
        let x = serde_json::json!({"b": [1, 2.5, "<a&'é>"], "a": null, "c": true});
        assert_eq!(
            render("{{ x | tojson }}", x.clone()),
            r#"{"a": null, "b": [1, 2.5, "<a&'é>"], "c": true}"#
        );
        assert_eq!(
            render(
                "{{ x | tojson(indent=2) }}",
                serde_json::json!({"a": [1], "b": {}})
            ),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}"
        );
        assert_eq!(
            render(
                "{{ x | tojson(ensure_ascii=true) }}",
                serde_json::json!("é\n")
            ),
            r#""\u00e9\n""#
        );
        assert_eq!(render("{{ x | tojson }}", serde_json::json!(2.0)), "2.0");
    }
}
