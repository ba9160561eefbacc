//! What the agents' own logs say, for the checker: when each agent process began each pass.
//!
//! An agent logs `Deploying version V` (INFO, with the default `tracing` timestamp
//! `YYYY-MM-DDTHH:MM:SS.ffffffZ`, UTC, from the machine's one clock, as the scripts' `date
//! +%s.%N`) when a pass begins, before it discovers and plans: the plan (and with it whether
//! the fleet is mixed, docs/design.md, "Exclusion") is made after that line.

use std::path::Path;

/// The times (seconds since the epoch) at which the agent whose output is `file` began its
/// passes, in order.
pub fn pass_starts(file: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains(" Deploying version "))
        .filter_map(|l| l.split_whitespace().next().and_then(epoch))
        .collect()
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z` as seconds since the epoch.
pub fn epoch(stamp: &str) -> Option<f64> {
    let stamp = stamp.strip_suffix('Z')?;
    let (date, time) = stamp.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':');
    let (h, min) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let s: f64 = t.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    Some((days_from_civil(y, m, day) * 86_400 + h * 3600 + min * 60) as f64 + s)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[test]
fn timestamps_are_read_as_the_scripts_clock_reads_them() {
    assert_eq!(epoch("1970-01-01T00:00:00Z"), Some(0.0));
    // `date -u -d @1795638274.25 +%FT%T.%6NZ`
    assert_eq!(epoch("2026-11-25T20:24:34.250000Z"), Some(1_795_638_274.25));
    assert_eq!(epoch("2000-03-01T00:00:00Z"), Some(951_868_800.0));
    assert_eq!(epoch("not a time"), None);
}
