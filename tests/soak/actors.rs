//! The well-behaved actors of the soak: the syncer (commits random changes to the git
//! repository and runs the real `zkdeployment sync` every second or so; sometimes it is
//! killed mid-apply, a nemesis fault), the operator (notices every halt, records it, and
//! resumes it after a moment with the real `zkdeployment resume`, recording any other halt
//! that resume says it cleared; journals node halts, node pauses and failure records and
//! ends them with `resume PATH`, see `budget.rs`; samples the hosts' versions) and the
//! supervisor (plays systemd: restarts an agent that exited 1).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use zkdeployment::zk::decode;

use super::rng::Rng;
use super::support::agent::now;
use super::world::World;

/// Commits and syncs until the world is calm: a sync every 0.5–1.5 s (most are refused
/// while hosts have not converged or the cluster is halted), a new commit before about half
/// of them. After three refusals in a row it forces one through (`--force`), as an
/// impatient operator would: under this many faults the fleet is seldom all converged.
pub async fn syncer(world: Arc<World>, mut rng: Rng) {
    let mut refused = 0;
    while !world.calm.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs_f64(rng.between(0.5, 1.5))).await;
        if world.calm.load(Ordering::SeqCst) {
            break;
        }
        if rng.chance(0.5) {
            let (_, tree) = world.last_commit();
            let next = tree.mutate(&world.plain_ids(), &mut rng);
            world.commit(next);
        }
        let kill = rng
            .chance(0.15)
            .then(|| Duration::from_secs_f64(rng.between(0.0, 0.3)));
        let force = refused >= 3;
        let outcome = world.sync(kill, force).await;
        if outcome == "killed" {
            world.fault("sync-kill");
        }
        refused = if outcome == "refused" { refused + 1 } else { 0 };
        let key = if force && outcome == "ok" {
            "forced".to_string()
        } else if outcome.starts_with("exit") {
            world.journal.lock().unwrap().sync_errors.push(outcome);
            "error".to_string()
        } else {
            outcome
        };
        *world.journal.lock().unwrap().syncs.entry(key).or_default() += 1;
    }
}

/// `/hosts` version as the scripts see it (`ZKDEPLOYMENT_VERSION`): a string as is, else JSON.
pub fn version_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Watches for halts (and resumes them) and samples host versions until `stop` is set.
pub async fn operator(world: Arc<World>, mut rng: Rng, stop: Arc<std::sync::atomic::AtomicBool>) {
    let mut last_sample = 0.0;
    let mut seen = std::collections::BTreeSet::new();
    let mut resumer = super::budget::Resumer::default();
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let props = match world
            .zk
            .call(|c| async move { c.get_data("/hosts").await })
            .await
        {
            Ok((data, _)) => decode(&data),
            Err(_) => continue,
        };
        // A halt record is recorded once, whether the cluster is still halted or a forced
        // sync has already moved on (a forced sync leaves the record standing).
        let mut props = props;
        let halted = props.get("version") == Some(&Value::Null);
        if halted && !props.get("halt").is_some_and(Value::is_object) {
            // Give a two-step writer the benefit of the doubt once.
            tokio::time::sleep(Duration::from_millis(500)).await;
            if let Ok((data, _)) = world
                .zk
                .call(|c| async move { c.get_data("/hosts").await })
                .await
            {
                props = decode(&data);
            }
        }
        let key = props.get("halt").map(Value::to_string).unwrap_or_default();
        let still = props.get("version") == Some(&Value::Null);
        let version = props.get("version").cloned().unwrap_or(Value::Null);
        {
            let t = now();
            let versions = &mut world.journal.lock().unwrap().versions;
            match versions.last_mut() {
                Some((v, _, last)) if *v == version => *last = t,
                _ => versions.push((version.clone(), t, t)),
            }
        }
        let looked_at = props
            .get("halt")
            .map(|h| (text(h, "host"), text(h, "error")));
        if (still || props.contains_key("halt")) && seen.insert(key) {
            world.journal.lock().unwrap().halts.push((now(), props));
        }
        if still {
            tokio::time::sleep(Duration::from_secs_f64(rng.between(0.2, 1.5))).await;
            let run =
                super::support::run_with_async(&["resume", "-z", &world.conn], None, &[]).await;
            if run.code == 0 {
                let mut journal = world.journal.lock().unwrap();
                journal.resumes += 1;
                // A halt recorded after the one looked at is cleared by this resume too,
                // unseen but for resume's account of what it cleared.
                for halt in run.stdout.lines().filter_map(cleared_halt) {
                    if Some((text(&halt, "host"), text(&halt, "error"))) != looked_at {
                        let mut props = serde_json::Map::new();
                        props.insert("version".into(), Value::Null);
                        props.insert("halt".into(), halt);
                        journal.halts.push((now(), props));
                    }
                }
            }
        }
        if let Some(present) = super::budget::observe(&world).await {
            resumer.round(&world, &present, &version, &mut rng).await;
        }
        if now() - last_sample > 1.0 {
            last_sample = now();
            sample_hosts(&world).await;
        }
    }
}

/// A field of a halt record as text.
fn text(halt: &Value, key: &str) -> String {
    version_text(halt.get(key).unwrap_or(&Value::Null))
}

/// A halt record from a line of `zkdeployment resume`'s output, `cleared: halted 5s ago by
/// NAME (HOST) deploying VERSION: ERROR` (`time`: now, when it was cleared).
pub fn cleared_halt(line: &str) -> Option<Value> {
    let rest = line.strip_prefix("cleared: halted")?;
    let (_, rest) = rest.split_once(" by ")?;
    let (name, rest) = rest.split_once(" (")?;
    let (host, rest) = rest.split_once(") deploying ")?;
    let (version, error) = rest.split_once(": ")?;
    Some(serde_json::json!({
        "host": host, "name": name, "version": version, "error": error, "time": now(),
    }))
}

/// Records the version each registered host says it is at.
pub async fn sample_hosts(world: &World) {
    let Ok(children) = world
        .zk
        .call(|c| async move { c.list_children("/hosts").await })
        .await
    else {
        return;
    };
    for child in children {
        let path = format!("/hosts/{child}");
        let Ok(Some((data, _))) = world
            .zk
            .call_opt(|c| async move { c.get_data(&path).await })
            .await
        else {
            continue;
        };
        let props = decode(&data);
        let pid = props.get("pid").and_then(Value::as_u64).unwrap_or(0);
        if let Some(v) = props.get("version") {
            if !v.is_null() {
                let t = now();
                world
                    .journal
                    .lock()
                    .unwrap()
                    .samples
                    .push((child, version_text(v), pid, t));
            }
        }
    }
}

/// Plays systemd for the agents until `stop` is set: one that exited 1 by itself (see
/// [`World::check_alive`]) is started again a second later.
pub async fn supervisor(world: Arc<World>, stop: Arc<std::sync::atomic::AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for i in 0..world.slots.len() {
            if !world.claim(i) {
                continue;
            }
            if !world.check_alive(i).await {
                tokio::time::sleep(Duration::from_secs(1)).await;
                world.start_agent(i).await;
            }
            world.release(i);
        }
    }
}
