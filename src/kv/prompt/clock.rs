//! `strftime_now(format)`, the global transformers gives chat templates
//! (Llama 3.x templates print today's date with it): the current time,
//! in UTC, formatted as C's `strftime` does for the common directives.
//!
//! transformers formats the server's local time; a router and its
//! servers that run in UTC (containers do by default) agree. A template
//! that prints the date changes its prompt at midnight either way.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// The global: the time now.
pub(super) fn strftime_now(format: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    strftime(secs, format)
}

/// `format` applied to `secs` seconds after the Unix epoch, UTC.
/// Directives: `%Y %y %m %d %e %j %H %I %M %S %p %b %B %a %A %%`; any
/// other is written as it stands.
pub(super) fn strftime(secs: u64, format: &str) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let (year, month, day) = civil_from_days(days);
    let weekday = usize::try_from((days + 3).rem_euclid(7)).unwrap_or(0); // 1970-01-01: Thursday
    let yday = days - days_from_civil(year, 1, 1) + 1;
    let month_name = MONTHS[usize::try_from(month - 1).unwrap_or(0)];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('Y') => write!(out, "{year}"),
            Some('y') => write!(out, "{:02}", year.rem_euclid(100)),
            Some('m') => write!(out, "{month:02}"),
            Some('d') => write!(out, "{day:02}"),
            Some('e') => write!(out, "{day:>2}"),
            Some('j') => write!(out, "{yday:03}"),
            Some('H') => write!(out, "{hour:02}"),
            Some('I') => write!(out, "{:02}", (hour + 11) % 12 + 1),
            Some('M') => write!(out, "{minute:02}"),
            Some('S') => write!(out, "{second:02}"),
            Some('p') => out.write_str(if hour < 12 { "AM" } else { "PM" }),
            Some('b') => out.write_str(&month_name[..3]),
            Some('B') => out.write_str(month_name),
            Some('a') => out.write_str(&DAYS[weekday][..3]),
            Some('A') => out.write_str(DAYS[weekday]),
            Some('%') => out.write_str("%"),
            Some(other) => write!(out, "%{other}"),
            None => out.write_str("%"),
        };
    }
    out
}

/// Howard Hinnant's `civil_from_days`: (year, month, day) of a day count
/// since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The inverse: days since 1970-01-01 of a date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::strftime;

    #[test]
    fn formats_as_strftime_does() {
        // 2024-02-29 13:05:09 UTC, a Thursday, the year's 60th day.
        let secs = 1_709_211_909;
        assert_eq!(strftime(secs, "%d %b %Y"), "29 Feb 2024");
        assert_eq!(
            strftime(secs, "%A %B %e %j %H:%M:%S %I%p %y %% %Q"),
            "Thursday February 29 060 13:05:09 01PM 24 % %Q"
        );
        assert_eq!(strftime(0, "%Y-%m-%d %a"), "1970-01-01 Thu");
    }
}
