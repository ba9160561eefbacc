//! What the agents' own logs say, for the checker: when each agent process began each pass,
//! and what it did with a failure of a node with a failure budget ([`outcomes`]).
//!
//! An agent logs `Deploying version V` (INFO, with the default `tracing` timestamp
//! `YYYY-MM-DDTHH:MM:SS.ffffffZ`, UTC, from the machine's one clock, as the scripts' `date
//! +%s.%N`) when a pass begins, before it discovers and plans: the plan (and with it whether
//! the fleet is mixed, docs/design.md, "Exclusion") is made after that line.

use std::path::Path;

use super::world::Outcome;

/// The times (seconds since the epoch) at which the agent whose output is `file` began its
/// passes, in order.
pub fn pass_starts(file: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains(" Deploying version "))
        .filter_map(|l| l.split_whitespace().next().and_then(epoch))
        .collect()
}

/// What the agent `pid` of `host`, whose output is `file`, said it did with failures of
/// nodes with a budget (CONTRACT 15): `PATH left undone: ERROR (failed host P of PATH,
/// within its budget of F (max-failures))` is a quarantine (`within`), `... ; the node is
/// halted)` a node halt; and what it left undone for them: `PATH left undone: quarantined
/// for ...` (`kept-quarantined`), `PATH is halted; not deploying it` (`kept-halted`), `...
/// is paused ...` (`kept-paused`); each at the version of the pass it belongs to (its last
/// `Deploying version V` line before it).
pub fn outcomes(file: &Path, host: &str, pid: u64) -> Vec<Outcome> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    outcomes_of(&text, host, pid)
}

/// [`outcomes`] of an agent's output `text`.
pub fn outcomes_of(text: &str, host: &str, pid: u64) -> Vec<Outcome> {
    let mut version = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some((_, v)) = line.split_once(" Deploying version ") {
            version = v.trim().to_string();
            continue;
        }
        if let Some(kept) = kept(line) {
            out.push(Outcome {
                version: version.clone(),
                host: host.to_string(),
                by: host.to_string(),
                pid,
                ..kept
            });
            continue;
        }
        if let Some(dead) = dead_counted(line) {
            out.push(Outcome {
                by: host.to_string(),
                pid,
                ..dead
            });
            continue;
        }
        let Some((head, error)) = line.split_once(" left undone: ") else {
            continue;
        };
        let (Some(path), Some(time)) = (
            head.split_whitespace().last(),
            line.split_whitespace().next().and_then(epoch),
        ) else {
            continue;
        };
        let kind = if error.starts_with("quarantined for ") {
            "kept-quarantined"
        } else if error.ends_with("; the node is halted)") {
            "node-halt"
        } else if !error.starts_with("quarantined for ") && within(error, path) {
            "within"
        } else {
            continue;
        };
        out.push(Outcome {
            host: host.to_string(),
            by: host.to_string(),
            pid,
            time,
            path: path.to_string(),
            version: version.clone(),
            kind,
        });
    }
    out
}

/// A node left undone because it is halted or paused (`PATH is halted; not deploying it`):
/// `kept-halted` or `kept-paused` (host, pid and version to be filled).
fn kept(line: &str) -> Option<Outcome> {
    let (head, kind) = if let Some((head, _)) = line.split_once(" is halted; not deploying it") {
        (head, "kept-halted")
    } else {
        let (head, _) = line.split_once(" is paused; not deploying it")?;
        (head, "kept-paused")
    };
    Some(Outcome {
        host: String::new(),
        by: String::new(),
        pid: 0,
        time: line.split_whitespace().next().and_then(epoch)?,
        path: head.split_whitespace().last()?.to_string(),
        version: String::new(),
        kind,
    })
}

/// A dead holder another host found and counted in its node's budget: `NAME (HOST) died
/// deploying PATH N (version V) since ...: ... (failed host P of PATH, within its budget of F
/// (max-failures))` (`within`, for HOST at V) or `... ; the node is halted)` (`node-halt`);
/// `by` and `pid` to be filled.
fn dead_counted(line: &str) -> Option<Outcome> {
    let (head, rest) = line.split_once(") died deploying ")?;
    let (_, host) = head.rsplit_once('(')?;
    let mut words = rest.split_whitespace();
    let path = words.next()?;
    let (_, after) = rest.split_once(" (version ")?;
    let (version, _) = after.split_once(')')?;
    let kind = if line.ends_with("; the node is halted)") {
        "node-halt"
    } else if within(line, path) {
        "within"
    } else {
        return None;
    };
    Some(Outcome {
        host: host.to_string(),
        by: String::new(),
        pid: 0,
        time: line.split_whitespace().next().and_then(epoch)?,
        path: path.to_string(),
        version: version.to_string(),
        kind,
    })
}

/// True if `error` ends as a quarantine's message of `path` does: `... (failed host P of
/// PATH, within its budget of F (max-failures))`.
fn within(error: &str, path: &str) -> bool {
    let Some((_, tail)) = error.rsplit_once(" (failed host ") else {
        return false;
    };
    let Some((place, rest)) = tail.split_once(&format!(" of {path}, within its budget of ")) else {
        return false;
    };
    let Some(f) = rest.strip_suffix(" (max-failures))") else {
        return false;
    };
    place.parse::<u32>().is_ok() && f.parse::<u32>().is_ok()
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

#[test]
fn outcomes_are_read_with_their_pass_version() {
    let log = "\
2026-11-25T20:24:34.250000Z  INFO zkdeployment::agent::execute: Deploying version v7
2026-11-25T20:24:35.000000Z ERROR zkdeployment::agent::deploy: /acme/a left undone: zookeeper-deploy /acme/a 0 exited 3 (failed host 2 of /acme/a, within its budget of 2 (max-failures))
2026-11-25T20:24:36.000000Z ERROR zkdeployment::agent::deploy: /acme/a left undone: quarantined for /acme/a at this cluster version: boom (failed host 2 of /acme/a, within its budget of 2 (max-failures))
2026-11-25T20:24:37.000000Z  INFO zkdeployment::agent::execute: Deploying version v8
2026-11-25T20:24:38.000000Z ERROR zkdeployment::agent::deploy: /acme/b left undone: boom (failed host 3 of /acme/b, beyond its budget of 2 (max-failures); the node is halted)
2026-11-25T20:24:39.000000Z ERROR zkdeployment::agent::deploy: /acme/c left undone: boom (failed host 3 of /acme/c, within its budget of x (max-failures))
2026-11-25T20:24:40.000000Z  WARN zkdeployment::agent::deploy: /acme/d is paused; not deploying it
2026-11-25T20:24:41.000000Z  WARN zkdeployment::agent::in_flight: h3.example.com (h3) died deploying /acme/e 1 (version v6) since 1795638270.5: in-flight record left in /agent-locks/acme,e (failed host 1 of /acme/e, within its budget of 1 (max-failures))
";
    let found = outcomes_of(log, "h1", 9);
    let brief: Vec<(&str, &str, &str, f64)> = found
        .iter()
        .map(|o| (o.path.as_str(), o.version.as_str(), o.kind, o.time))
        .collect();
    assert_eq!(
        brief,
        [
            ("/acme/a", "v7", "within", 1_795_638_275.0),
            ("/acme/a", "v7", "kept-quarantined", 1_795_638_276.0),
            ("/acme/b", "v8", "node-halt", 1_795_638_278.0),
            ("/acme/d", "v8", "kept-paused", 1_795_638_280.0),
            ("/acme/e", "v6", "within", 1_795_638_281.0)
        ]
    );
    assert_eq!((found[4].host.as_str(), found[4].by.as_str()), ("h3", "h1"));
}
