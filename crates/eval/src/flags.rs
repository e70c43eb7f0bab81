//! The value parsers the binaries' command lines share (each binary's
//! `args.rs` derives its flags with clap and names these as the
//! `value_parser` of a flag): numbers in a range, seconds, a name out of a
//! list, comma-separated lists. Each is a function of the flag's text that
//! says what was wrong with it; clap puts the flag's name in front.

use std::fmt::Display;
use std::str::FromStr;
use std::time::Duration;

/// A flag's comma-separated list (`--strategies a,b`), as one value: given
/// once, split here (clap would take a `Vec` field's flag many times).
#[derive(Debug, Clone, PartialEq)]
pub struct List<T>(pub Vec<T>);

/// A whole number in `min..=max`.
pub fn whole<T>(min: T, max: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: FromStr + PartialOrd + Display + Copy + Send + Sync,
{
    move |text| match text.trim().parse::<T>() {
        Ok(v) if v >= min && v <= max => Ok(v),
        _ => Err(format!("`{text}` is not a whole number in {min}..={max}")),
    }
}

/// A finite number in `min..=max`.
pub fn number(min: f64, max: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync {
    move |text| match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= min && v <= max => Ok(v),
        _ => Err(format!("`{text}` is not a number in {min}..={max}")),
    }
}

/// A number of seconds in `min..=max`, as a [`Duration`].
pub fn seconds(
    min: f64,
    max: f64,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    let number = number(min, max);
    move |text| match number(text) {
        Ok(secs) => Ok(Duration::from_secs_f64(secs)),
        Err(_) => Err(format!(
            "`{text}` is not a number of seconds in {min}..={max}"
        )),
    }
}

/// One of `names`, as the list's own `&'static str`.
pub fn one_of(
    names: &'static [&'static str],
) -> impl Fn(&str) -> Result<&'static str, String> + Clone + Send + Sync {
    move |text| {
        let text = text.trim();
        names
            .iter()
            .find(|n| **n == text)
            .copied()
            .ok_or_else(|| format!("`{text}` is not one of {}", names.join(", ")))
    }
}

/// A comma-separated list of values, each read by `item`, none empty.
pub fn list<T, F>(item: F) -> impl Fn(&str) -> Result<List<T>, String> + Clone + Send + Sync
where
    F: Fn(&str) -> Result<T, String> + Clone + Send + Sync,
{
    move |text| {
        text.split(',')
            .map(&item)
            .collect::<Result<_, _>>()
            .map(List)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_parser_says_what_it_takes() {
        assert_eq!(whole(2usize, 64)("8"), Ok(8));
        assert!(whole(2usize, 64)("65").unwrap_err().contains("2..=64"));
        assert_eq!(number(0.01, 4.0)("0.3"), Ok(0.3));
        assert!(number(0.0, 3.0)("NaN").is_err());
        assert_eq!(seconds(0.5, 600.0)("2"), Ok(Duration::from_secs(2)));
        assert!(seconds(0.5, 600.0)("0.1")
            .unwrap_err()
            .contains("0.5..=600"));
        const NAMES: [&str; 2] = ["a", "b"];
        let names = list(one_of(&NAMES));
        assert_eq!(names("a, b,a"), Ok(List(vec!["a", "b", "a"])));
        assert!(names("a,").unwrap_err().contains("not one of a, b"));
    }
}
