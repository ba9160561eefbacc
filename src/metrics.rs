//! The agent's Prometheus textfile (`metrics-file`, for node_exporter's textfile collector):
//! converged and halted gauges, last pass and last success timestamps, the last pass's
//! duration, passes by result, the time spent waiting for node locks, and the expiry of the
//! TLS client certificate (when one is configured). Rewritten
//! atomically (temporary file + rename) so a reader never sees a partial file.

use std::fmt::Write as _;
use std::path::Path;

/// Counters and gauges kept by the agent process (counters start at 0 with the process).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// 1 if the host is at the cluster version.
    pub converged: bool,
    /// 1 if the cluster is halted.
    pub halted: bool,
    /// Unix time the last pass ended (0 = none yet).
    pub last_pass: f64,
    /// Unix time the last successful pass ended (0 = none yet).
    pub last_success: f64,
    /// Seconds the last pass took.
    pub pass_duration: f64,
    /// Passes that ended `done`.
    pub passes_done: u64,
    /// Passes that ended `error`.
    pub passes_error: u64,
    /// Passes that ended `abandoned`.
    pub passes_abandoned: u64,
    /// Seconds spent waiting for node locks, in total.
    pub lock_wait: f64,
    /// Steps run, in total.
    pub steps: u64,
    /// The TLS client certificate's notAfter (Unix time), if one is configured.
    pub tls_client_cert_expiry: Option<f64>,
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(&str, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

impl Metrics {
    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let b = |v: bool| if v { 1.0 } else { 0.0 };
        metric(
            &mut out,
            "zkdeployment_converged",
            "gauge",
            "1 if this host is at the cluster version.",
            &[("", b(self.converged))],
        );
        metric(
            &mut out,
            "zkdeployment_cluster_halted",
            "gauge",
            "1 if the cluster is halted (version None).",
            &[("", b(self.halted))],
        );
        metric(
            &mut out,
            "zkdeployment_last_pass_timestamp_seconds",
            "gauge",
            "Unix time the last deployment pass ended.",
            &[("", self.last_pass)],
        );
        metric(
            &mut out,
            "zkdeployment_last_success_timestamp_seconds",
            "gauge",
            "Unix time the last successful deployment pass ended.",
            &[("", self.last_success)],
        );
        metric(
            &mut out,
            "zkdeployment_pass_duration_seconds",
            "gauge",
            "Duration of the last deployment pass.",
            &[("", self.pass_duration)],
        );
        metric(
            &mut out,
            "zkdeployment_passes_total",
            "counter",
            "Deployment passes by result since the agent started.",
            &[
                ("{result=\"done\"}", self.passes_done as f64),
                ("{result=\"error\"}", self.passes_error as f64),
                ("{result=\"abandoned\"}", self.passes_abandoned as f64),
            ],
        );
        metric(
            &mut out,
            "zkdeployment_lock_wait_seconds_total",
            "counter",
            "Time spent waiting for node locks.",
            &[("", self.lock_wait)],
        );
        metric(
            &mut out,
            "zkdeployment_steps_total",
            "counter",
            "Deployment steps run.",
            &[("", self.steps as f64)],
        );
        if let Some(expiry) = self.tls_client_cert_expiry {
            metric(
                &mut out,
                "zkdeployment_tls_client_cert_expiry_timestamp_seconds",
                "gauge",
                "Unix time the TLS client certificate for ZooKeeper expires (notAfter).",
                &[("", expiry)],
            );
        }
        out
    }

    /// Writes the file atomically.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        crate::files::write_atomic(path, self.render().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_series_with_help_and_type() {
        let m = Metrics {
            converged: true,
            passes_done: 2,
            lock_wait: 1.5,
            ..Metrics::default()
        };
        let text = m.render();
        assert!(text.contains("zkdeployment_converged 1\n"));
        assert!(text.contains("zkdeployment_passes_total{result=\"done\"} 2\n"));
        assert!(text.contains("zkdeployment_lock_wait_seconds_total 1.5\n"));
        assert!(
            !text.contains("tls_client_cert"),
            "only with a client certificate"
        );
        assert_eq!(text.matches("# TYPE").count(), 8);
        let with_cert = Metrics {
            tls_client_cert_expiry: Some(1_700_000_000.0),
            ..m
        };
        assert!(with_cert
            .render()
            .contains("zkdeployment_tls_client_cert_expiry_timestamp_seconds 1700000000\n"));
    }
}
