//! CPU time of a process and its descendants, from `/proc` (Linux): for
//! each live process of the tree, the time its live threads ran, in
//! nanoseconds (the first field of `/proc/PID/task/TID/schedstat`), plus
//! what its exited threads used (its `utime + stime` from `/proc/PID/stat`
//! less its live threads' own, in clock ticks of 10 ms: nothing finer is
//! kept of them), plus what its reaped children used (`cutime + cstime`,
//! in ticks too).
//!
//! The ticks alone miss a router that ran for less than a tick between
//! two readings: a light run of a few milliseconds read as zero.

use std::collections::HashMap;
use std::path::Path;
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

/// What one process's `/proc/PID/stat` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    parent: u32,
    /// `utime + stime`: its own threads, live and exited, in ticks.
    own: u64,
    /// `cutime + cstime`: its reaped children, in ticks.
    children: u64,
}

/// One process's [`Stat`], from the text of its `/proc/PID/stat`.
fn parse_stat(stat: &str) -> Option<Stat> {
    // The command name, field 2, is in parentheses and may hold spaces:
    // the fields that follow start after its last `)`.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // From field 3 (state): ppid is field 4, utime..cstime fields 14..=17.
    let field = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(Stat {
        parent: fields.get(1)?.parse().ok()?,
        own: field(11)? + field(12)?,
        children: field(13)? + field(14)?,
    })
}

/// The time a thread ran, ns: the first field of its `schedstat`.
fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The live threads of `process` (its `/proc/PID` folder): the time they
/// ran, ns, and their `utime + stime`, ticks.
fn threads(process: &Path) -> (u64, u64) {
    let (mut ns, mut ticks) = (0, 0);
    let Ok(tasks) = std::fs::read_dir(process.join("task")) else {
        return (0, 0);
    };
    for task in tasks.flatten() {
        let read = |name: &str| std::fs::read_to_string(task.path().join(name)).ok();
        // A thread may end between the listing and the reads: skipped.
        if let (Some(run), Some(stat)) = (
            read("schedstat").and_then(|s| parse_schedstat(&s)),
            read("stat").and_then(|s| parse_stat(&s)),
        ) {
            ns += run;
            ticks += stat.own;
        }
    }
    (ns, ticks)
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
    let tick_ns = 1_000_000_000 / ticks_per_second.max(1);
    let mut total_ns = 0u64;
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        let stat = processes[&pid];
        let (live_ns, live_ticks) = threads(Path::new(&format!("/proc/{pid}")));
        let exited = stat.own.saturating_sub(live_ticks);
        total_ns += live_ns + (exited + stat.children) * tick_ns;
        stack.extend(
            processes
                .iter()
                .filter(|(_, s)| s.parent == pid)
                .map(|(child, _)| *child),
        );
    }
    Some(Duration::from_nanos(total_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_parent_and_the_times_past_a_name_with_spaces() {
        let stat = "4146 (vllm::router x) S 4142 4146 4085 0 -1 4194560 9 0 0 0 120 30 4 6 20 0 9";
        let expected = Stat {
            parent: 4142,
            own: 150,
            children: 10,
        };
        assert_eq!(parse_stat(stat), Some(expected));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_schedstat("123456789 2000 17\n"), Some(123_456_789));
        assert_eq!(parse_schedstat(""), None);
    }

    /// A millisecond of work, less than a clock tick, shows: the figure is
    /// finer than the ticks of `/proc/PID/stat`. Measured in a process of
    /// its own (this test binary run again for [`tick_of_work_child`]):
    /// here, another test's thread ending between the two reads moves its
    /// time from nanoseconds to ticks, rounded down, and the sum can drop.
    #[test]
    fn less_than_a_tick_of_work_shows() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "cpu::tests::tick_of_work_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        // libtest prints the test's name first, on the same line.
        let line = stdout.lines().find_map(|l| l.split("tick-of-work ").nth(1));
        let line = line.unwrap_or_else(|| panic!("{out:?}"));
        let ns: Vec<u64> = line.split(' ').map(|n| n.parse().unwrap()).collect();
        assert!(ns[1] > ns[0], "{ns:?}");
    }

    /// Set for [`tick_of_work_child`]'s process.
    const CHILD: &str = "PEER_TICK_OF_WORK_CHILD";

    /// Not a test by itself: run by `less_than_a_tick_of_work_shows` in a
    /// process with no other test's threads; prints the process's CPU
    /// time, in ns, before and after a millisecond of work.
    #[test]
    #[ignore = "run by less_than_a_tick_of_work_shows, in a child process"]
    fn tick_of_work_child() {
        if std::env::var(CHILD).is_err() {
            return;
        }
        let ticks = ticks_per_second();
        let me = std::process::id();
        let before = tree_time(me, ticks).expect("this process is there");
        let start = tokio::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(1) {
            for i in 0..1000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        std::hint::black_box(x);
        let after = tree_time(me, ticks).expect("this process is there");
        println!("tick-of-work {} {}", before.as_nanos(), after.as_nanos());
    }
}
