//! Sync benchmark: the ~50,000-node fleet split over several `.zk` files in a git repository,
//! a first sync into an empty ZooKeeper, then an unchanged re-sync (forced, so it re-reads and
//! diffs everything; it must write nothing), a commit that changes one deploy target (the
//! index operations it costs, counted from the index nodes' stats), then the same with
//! `--auth`: the first protected sync of the open tree, a forced re-sync and an up-to-date
//! run, which check every ACL. Run with `cargo bench --bench sync`.

// A bench uses a few of the test helpers.
#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

mod fleet;

use std::collections::BTreeMap;
use std::time::Instant;

use support::git::TestRepo;
use zkdeployment::sync::{run, Options, Outcome};

fn main() {
    let customers = fleet::customers();
    fleet::runtime().block_on(async {
        let files = fleet::fleet_files(customers, 100);
        let repo = TestRepo::new();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        repo.commit(&refs);
        let work = tempfile::tempdir().unwrap();
        let conn = support::chroot("bench-sync").await;
        let mut opts = Options {
            url: repo.url(),
            dir: work.path().join("checkout"),
            branch: "master".into(),
            dry_run: false,
            force: false,
            connection: conn,
            auth: None,
            tls: Default::default(),
            max_answer: zkdeployment::zk::connect::DEFAULT_JUTE_MAXBUFFER,
            open_hosts: false,
            git_bound: zkdeployment::sync::git::DEFAULT_BOUND,
        };
        let t = Instant::now();
        let first = run(&opts).await.expect("first sync");
        let secs = t.elapsed().as_secs_f64();
        let Outcome::Applied { writes, .. } = first else {
            panic!("{first:?}")
        };
        println!(
            "first sync ({} files, clone + parse + apply): {writes} writes in {secs:.2} s",
            files.len()
        );
        opts.force = true;
        let t = Instant::now();
        let again = run(&opts).await.expect("re-sync");
        let Outcome::Applied { writes, .. } = again else {
            panic!("{again:?}")
        };
        println!(
            "unchanged re-sync (fetch + parse + read + diff): {writes} writes in {:.2} s",
            t.elapsed().as_secs_f64()
        );
        assert_eq!(writes, 0, "an unchanged re-sync must not write");

        // Two commits, each changing one deploy target of the fleet (one more deploy node for
        // host-199, then for host-198): what the sync writes into the deployment index,
        // counted from the index nodes' stats (created, changed, deleted), whatever the code
        // counts itself.
        let client = support::connect(&opts.connection).await;
        let mut changed = files.clone();
        opts.force = false;
        for (i, target) in ["host-199", "host-198"].into_iter().enumerate() {
            let before = index_stats(&client).await;
            changed[0].1 = changed[0].1.replacen(
                "      /host-3\n",
                &format!("      /host-3\n      /{target}\n"),
                1,
            );
            let refs: Vec<(&str, &str)> = changed
                .iter()
                .map(|(n, t)| (n.as_str(), t.as_str()))
                .collect();
            repo.commit(&refs);
            let t = Instant::now();
            let one = run(&opts).await.expect("sync of one changed target");
            let secs = t.elapsed().as_secs_f64();
            let Outcome::Applied { writes, .. } = one else {
                panic!("{one:?}")
            };
            let after = index_stats(&client).await;
            let created = after.keys().filter(|p| !before.contains_key(*p)).count();
            let deleted = before.keys().filter(|p| !after.contains_key(*p)).count();
            let rewritten = after
                .iter()
                .filter(|(p, (_, m))| before.get(*p).is_some_and(|(_, was)| was != m))
                .count();
            println!(
                "commit {} changing one deploy target ({} index nodes before): {writes} writes reported; index nodes created {created}, changed {rewritten}, deleted {deleted}: {} index operations, in {secs:.2} s",
                i + 1,
                before.len(),
                created + rewritten + deleted
            );
        }
        opts.force = true;

        // Least privilege: the first `sync --auth` on the open tree sets every ACL; after it,
        // a forced re-sync and the cron's up-to-date run check them all and change nothing.
        opts.auth = Some(zkdeployment::config::Identity::Digest(
            zkdeployment::config::Secret::new("bench:pw"),
        ));
        let t = Instant::now();
        let protected = run(&opts).await.expect("sync --auth");
        let Outcome::Applied { writes, .. } = protected else {
            panic!("{protected:?}")
        };
        println!(
            "first sync --auth of the open tree (reads every ACL, repairs): {writes} writes in {:.2} s",
            t.elapsed().as_secs_f64()
        );
        let t = Instant::now();
        let again = run(&opts).await.expect("re-sync --auth");
        let Outcome::Applied { writes, .. } = again else {
            panic!("{again:?}")
        };
        println!(
            "unchanged re-sync --auth (also checks every ACL): {writes} writes in {:.2} s",
            t.elapsed().as_secs_f64()
        );
        assert_eq!(writes, 0, "an unchanged protected re-sync must not write");
        opts.force = false;
        let t = Instant::now();
        let current = run(&opts).await.expect("up-to-date sync --auth");
        assert!(matches!(current, Outcome::UpToDate { .. }), "{current:?}");
        println!(
            "up-to-date sync --auth (the cron's usual run: fetch, parse, check every ACL): {:.2} s",
            t.elapsed().as_secs_f64()
        );
    });
}

/// Every node under `/deployment-index` (the root included), with its `czxid` and `mzxid`.
async fn index_stats(client: &zkdeployment::zk::Client) -> BTreeMap<String, (i64, i64)> {
    let mut out = BTreeMap::new();
    let mut todo = vec!["/deployment-index".to_string()];
    while let Some(path) = todo.pop() {
        let Some(stat) = client.check_stat(&path).await.unwrap() else {
            continue;
        };
        out.insert(path.clone(), (stat.czxid, stat.mzxid));
        let (children, _) = client.get_children(&path).await.unwrap();
        todo.extend(children.iter().map(|c| format!("{path}/{c}")));
    }
    out
}
