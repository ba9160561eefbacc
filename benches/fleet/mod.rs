//! A generated fleet tree for the benchmarks: customers with a config node and applications,
//! each deployed to a few hosts; split over several `.zk` files like a real repository.
#![allow(dead_code)]

/// Hosts the generated apps deploy to.
pub const HOSTS: usize = 200;
/// The host the agent benchmark plays (it gets a handful of deployments).
pub const BENCH_HOST: &str = "bench-host";

/// Customers to generate: `BENCH_CUSTOMERS`, default 1,000 (about 50,000 nodes).
pub fn customers() -> usize {
    std::env::var("BENCH_CUSTOMERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// The single-threaded runtime the agent itself uses.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Text of the fleet: `(file name, text)` pairs, `per_file` customers per file.
/// Each customer is 50 nodes, so 1,000 customers are about 50,000 nodes.
pub fn fleet_files(customers: usize, per_file: usize) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for start in (0..customers).step_by(per_file.max(1)) {
        let mut text = String::new();
        for c in start..(start + per_file).min(customers) {
            customer(&mut text, c);
        }
        files.push((format!("fleet-{:04}.zk", start / per_file.max(1)), text));
    }
    files
}

/// The whole fleet as one text.
pub fn fleet_text(customers: usize) -> String {
    fleet_files(customers, customers)
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

fn customer(out: &mut String, c: usize) {
    out.push_str(&format!(
        "/cust{c:04}\n  /config\n    db = 'db{}.example.com'\n    port = {}\n",
        c % 7,
        5000 + c % 100
    ));
    for a in 0..8 {
        out.push_str(&format!(
            "  /app{a} : pkg{a}\n    version = '1.{}'\n    threads = {}\n",
            a % 3,
            a + 1
        ));
        out.push_str("    config -> ../config\n    /deploy\n");
        for h in 0..4 {
            out.push_str(&format!("      /host-{}\n", (c * 8 + a * 4 + h) % HOSTS));
            if h == 0 {
                out.push_str("        n = 2\n");
            }
        }
    }
    if c % 100 == 0 {
        out.push_str(&format!(
            "  /bench{c} : benchpkg\n    version = '1.0'\n    /deploy\n      /{BENCH_HOST}\n"
        ));
    }
}
