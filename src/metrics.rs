//! The agent's Prometheus textfile (`metrics-file`, for node_exporter's textfile collector):
//! converged and halted gauges, last pass and last success timestamps, the last pass's
//! duration, passes by result, the time spent waiting for node locks, the application nodes
//! this host is quarantined for or blocked by (CONTRACT 15), and the expiry of the
//! TLS client certificate (when one is configured). Rewritten
//! atomically (temporary file + rename) so a reader never sees a partial file.

use std::fmt::Write as _;
use std::path::Path;

/// Counters and gauges kept by the agent process (counters start at 0 with the process).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Metrics {
    /// 1 if the host is at the cluster version.
    pub(crate) converged: bool,
    /// 1 if the cluster is halted.
    pub(crate) halted: bool,
    /// Unix time the last pass ended (0 = none yet).
    pub(crate) last_pass: f64,
    /// Unix time the last successful pass ended (0 = none yet).
    pub(crate) last_success: f64,
    /// Seconds the last pass took.
    pub(crate) pass_duration: f64,
    /// Passes that ended `done`.
    pub(crate) passes_done: u64,
    /// Passes that ended `error`.
    pub(crate) passes_error: u64,
    /// Passes that ended `abandoned`.
    pub(crate) passes_abandoned: u64,
    /// Seconds spent waiting for node locks, in total.
    pub(crate) lock_wait: f64,
    /// Steps run, in total.
    pub(crate) steps: u64,
    /// The TLS client certificate's notAfter (Unix time), if one is configured.
    pub(crate) tls_client_cert_expiry: Option<f64>,
    /// Application nodes this host failed within their budget at the cluster version (it
    /// runs them no more at that version).
    pub(crate) quarantined: Vec<String>,
    /// Application nodes the last pass left undone because they are halted.
    pub(crate) blocked_halted: Vec<String>,
    /// Application nodes the last pass left undone because they are paused.
    pub(crate) blocked_paused: Vec<String>,
}

/// A label set `{path="…"}`, escaped as the exposition format wants.
fn path_label(path: &str) -> String {
    let v = path
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    format!("{{path=\"{v}\"}}")
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
    pub(crate) fn render(&self) -> String {
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
        self.render_nodes(&mut out);
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

    /// The node gauges: one sample per quarantined node, and per node that blocked the last
    /// pass with its reason.
    fn render_nodes(&self, out: &mut String) {
        let quarantined: Vec<(String, f64)> = self
            .quarantined
            .iter()
            .map(|p| (path_label(p), 1.0))
            .collect();
        let samples: Vec<(&str, f64)> = quarantined.iter().map(|(l, v)| (l.as_str(), *v)).collect();
        metric(
            out,
            "zkdeployment_node_quarantined",
            "gauge",
            "1 for each application node this host failed within its budget at the cluster version.",
            &samples,
        );
        let blocked: Vec<(String, f64)> = [
            ("halted", &self.blocked_halted),
            ("paused", &self.blocked_paused),
        ]
        .into_iter()
        .flat_map(|(why, paths)| {
            paths.iter().map(move |p| {
                let label = path_label(p);
                let inner = label.trim_start_matches('{').trim_end_matches('}');
                (format!("{{{inner},reason=\"{why}\"}}"), 1.0)
            })
        })
        .collect();
        let samples: Vec<(&str, f64)> = blocked.iter().map(|(l, v)| (l.as_str(), *v)).collect();
        metric(
            out,
            "zkdeployment_node_blocked",
            "gauge",
            "1 for each application node the last pass left undone, halted or paused (reason).",
            &samples,
        );
    }

    /// Writes the file atomically.
    pub(crate) fn write(&self, path: &Path) -> std::io::Result<()> {
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
        assert_eq!(text.matches("# TYPE").count(), 10);
        let with_cert = Metrics {
            tls_client_cert_expiry: Some(1_700_000_000.0),
            quarantined: vec!["/a/b".into()],
            blocked_halted: vec!["/c\"d".into()],
            blocked_paused: vec!["/e".into()],
            ..m
        };
        let text = with_cert.render();
        assert!(
            text.contains("zkdeployment_node_quarantined{path=\"/a/b\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("zkdeployment_node_blocked{path=\"/c\\\"d\",reason=\"halted\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("zkdeployment_node_blocked{path=\"/e\",reason=\"paused\"} 1\n"),
            "{text}"
        );
        assert!(with_cert
            .render()
            .contains("zkdeployment_tls_client_cert_expiry_timestamp_seconds 1700000000\n"));
    }
}
