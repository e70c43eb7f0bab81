//! CPU time of a process and its descendants, from `/proc` (Linux): the
//! user and system time of each live process of the tree (every thread
//! of it: `utime` and `stime` of `/proc/PID/stat` sum a process's
//! threads) plus what its reaped children used (`cutime`, `cstime`).

use std::collections::HashMap;
use std::time::Duration;

/// The clock ticks per second `/proc` counts in (`getconf CLK_TCK`; 100 on
/// every Linux architecture in practice, and when `getconf` is missing).
pub fn ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
        .filter(|&ticks| ticks > 0)
        .unwrap_or(100)
}

/// One process's `(parent, utime + stime + cutime + cstime)` in ticks,
/// from the text of its `/proc/PID/stat`.
fn parse_stat(stat: &str) -> Option<(u32, u64)> {
    // The command name, field 2, is in parentheses and may hold spaces:
    // the fields that follow start after its last `)`.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // From field 3 (state): ppid is field 4, utime..cstime fields 14..=17.
    let parent = fields.get(1)?.parse().ok()?;
    let ticks = (11..=14)
        .map(|i| fields.get(i)?.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    Some((parent, ticks))
}

/// The CPU time used so far by `root` and every live process below it;
/// `None` when `root` is gone or `/proc` cannot be read.
pub fn tree_time(root: u32, ticks_per_second: u64) -> Option<Duration> {
    let mut processes = HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may end between the listing and the read: skipped.
        if let Some(stat) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| parse_stat(&s))
        {
            processes.insert(pid, stat);
        }
    }
    processes.get(&root)?;
    let mut total = 0;
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        total += processes[&pid].1;
        stack.extend(
            processes
                .iter()
                .filter(|(_, (parent, _))| *parent == pid)
                .map(|(child, _)| *child),
        );
    }
    Some(Duration::from_secs_f64(
        total as f64 / ticks_per_second as f64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_parent_and_the_times_past_a_name_with_spaces() {
        let stat = "4146 (vllm::router x) S 4142 4146 4085 0 -1 4194560 9 0 0 0 120 30 4 6 20 0 9";
        assert_eq!(parse_stat(stat), Some((4142, 160)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_uses_some_time() {
        let ticks = ticks_per_second();
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        std::hint::black_box(x);
        let used = tree_time(std::process::id(), ticks).expect("this process is there");
        assert!(used > Duration::ZERO, "{used:?}");
    }
}
