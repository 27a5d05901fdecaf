//! CPU time spent during a run, read from `/proc`: the controller's own and the whole
//! machine's. On a machine the cluster shares with refill, wall time follows the CPU
//! every process spends, so these tell refill's own cost from the cluster's.

/// Clock ticks per second in `/proc` (USER_HZ, 100 on every Linux this runs on).
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU seconds the whole machine spent busy (all cores, every state but idle and
/// I/O wait) since boot.
pub fn machine_busy() -> f64 {
    std::fs::read_to_string("/proc/stat").map_or(0.0, |s| busy_of(&s))
}

fn busy_of(stat: &str) -> f64 {
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy: u64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    busy as f64 / TICKS_PER_SECOND
}

/// CPU seconds (user and system) process `pid` spent so far.
pub fn process(pid: u32) -> Option<f64> {
    process_of(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn process_of(stat: &str) -> Option<f64> {
    // The command name, in parentheses, may hold spaces: count fields after it.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5) are utime and stime; after the name they are 12, 13.
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some((user + system) as f64 / TICKS_PER_SECOND)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_machine_counts_every_state_but_idle_and_io_wait() {
        let stat = "cpu  100 20 30 5000 700 1 2 3 0 0\ncpu0 50 10 15 2500 350 0 1 1 0 0\n";
        assert_eq!(
            super::busy_of(stat),
            (100 + 20 + 30 + 1 + 2 + 3) as f64 / 100.0
        );
    }

    #[test]
    fn a_process_counts_user_and_system_after_its_name() {
        let stat = "42 (refill (x) y) S 1 42 42 0 -1 4194560 900 0 0 0 250 75 0 0 20 0 9 0";
        assert_eq!(super::process_of(stat), Some(3.25));
    }
}
