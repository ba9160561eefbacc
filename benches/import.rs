//! Import benchmark: a generated ~50,000-node tree imported into an empty ZooKeeper
//! (pipelined), re-imported unchanged (must send no write), and imported one request at a time
//! for comparison. Run with `cargo bench --bench import` (ZooKeeper from Debian's package).

// A bench uses a few of the test helpers.
#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

mod fleet;

use std::time::Instant;

use zkdeployment::tree::parse::parse;
use zkdeployment::zk::import::{apply_one_by_one, import_tree, plan, read_existing, Trim};

fn main() {
    let customers = fleet::customers();
    fleet::runtime().block_on(async {
        let text = fleet::fleet_text(customers);
        let t = Instant::now();
        let tree = parse(&text).expect("generated tree parses");
        let nodes = tree.descendants();
        println!("parse: {nodes} nodes, {} bytes of text in {:.3} s", text.len(), t.elapsed().as_secs_f64());

        let conn = support::chroot("bench-import").await;
        let client = support::connect(&conn).await;
        let t = Instant::now();
        let done = import_tree(&client, &tree, "/", Trim::Yes, false).await.expect("import");
        let secs = t.elapsed().as_secs_f64();
        println!(
            "import (pipelined) into an empty ZooKeeper: {nodes} nodes in {secs:.2} s ({:.0} nodes/s, {} writes)",
            nodes as f64 / secs,
            done.writes
        );

        let t = Instant::now();
        let again = import_tree(&client, &tree, "/", Trim::Yes, false).await.expect("re-import");
        println!("identical re-import: {} writes in {:.2} s", again.writes, t.elapsed().as_secs_f64());
        assert_eq!(again.writes, 0, "an identical re-import must not write");

        let conn = support::chroot("bench-import-seq").await;
        let client = support::connect(&conn).await;
        let existing = read_existing(&client, &tree, "/").await.unwrap().unwrap();
        let ops = plan(&tree, "/", &existing, &|_| Trim::Yes, false).ops;
        let t = Instant::now();
        let n = apply_one_by_one(&client, &ops).await.expect("sequential import");
        let secs = t.elapsed().as_secs_f64();
        println!(
            "import one request at a time (for comparison): {n} writes in {secs:.2} s ({:.0} nodes/s)",
            n as f64 / secs
        );
    });
}
