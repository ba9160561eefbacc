//! Sync benchmark: the ~50,000-node fleet split over several `.zk` files in a git repository,
//! a first sync into an empty ZooKeeper, then an unchanged re-sync (forced, so it re-reads and
//! diffs everything; it must write nothing), then the same with `--auth`: the first protected
//! sync of the open tree, a forced re-sync and an up-to-date run, which check every ACL. Run
//! with `cargo bench --bench sync`.

// A bench uses a few of the test helpers.
#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

mod fleet;

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
