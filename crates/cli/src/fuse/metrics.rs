//! `stitchfs mount --metrics ADDR`: the figures of `stitchfs stats` in
//! the Prometheus text exposition format, served over HTTP at
//! `http://ADDR/metrics` by a thread of the mount (off unless asked).
//!
//! Names: `stitchfs_` and the JSON path with dots as underscores
//! (`docs/stats.md`). Counters end in `_total`; figures of the present
//! state (`live_patches`, `dirty_bytes`, `streams`, ...) are gauges. The
//! requests become labelled families: `stitchfs_requests_total{op}`,
//! `stitchfs_request_errors_total{op}`, and a summary
//! `stitchfs_request_latency_seconds{op,quantile}` with its `_sum` and
//! `_count`, and `stitchfs_request_latency_max_seconds{op}`; each
//! stream's pending changes `stitchfs_stream_pending_changes{stream}`.

use super::stats::Source;
use serde_json::Value;
use std::fmt::Write;

/// The figures that are a present state, not a count since the mount.
const GAUGES: [&str; 18] = [
    "patches.undo_bytes_live",
    "patches.live_patches",
    "patches.dirty_blocks",
    "patches.cached_blocks",
    "memfs.pages",
    "memfs.dirty_pages",
    "memfs.dirty_bytes",
    "memfs.dirty_inodes",
    "memfs.inodes",
    "domains.streams",
    "domains.contexts",
    "domains.pending_changes",
    "domains.patchgroups",
    "domains.patchgroups_engaged",
    "domains.patchgroups_sealed",
    "domains.patchgroup_pending_changes",
    "journal.log_used_blocks",
    "journal.log_capacity_blocks",
];

/// Starts serving `source`'s figures on `addr` (`HOST:PORT`): the
/// listener is bound before this returns, so a bad address is the
/// caller's error, not a thread's.
pub fn serve(addr: &str, source: Source) -> anyhow::Result<std::net::SocketAddr> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| anyhow::anyhow!("serving metrics on {addr}: {e}"))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| anyhow::anyhow!("serving metrics on {addr}: not an IP address"))?;
    std::thread::Builder::new()
        .name("stitchfs-metrics".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                let path = request.url().split('?').next().unwrap_or("");
                let response = match (request.method(), path) {
                    (tiny_http::Method::Get, "/metrics") => match source.figures() {
                        Ok(v) => text(200, exposition(&v)),
                        Err(e) => text(503, format!("the figures could not be read: {e}\n")),
                    },
                    (tiny_http::Method::Get, _) => text(404, "try /metrics\n".into()),
                    _ => text(405, "GET only\n".into()),
                };
                // A client that went away is no concern of the mount's.
                let _ = request.respond(response);
            }
        })?;
    Ok(bound)
}

fn text(code: u16, body: String) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let kind = tiny_http::Header::from_bytes(
        &b"Content-Type"[..],
        &b"text/plain; version=0.0.4; charset=utf-8"[..],
    )
    .expect("a valid header");
    tiny_http::Response::from_string(body)
        .with_status_code(code)
        .with_header(kind)
}

/// The figures in the Prometheus text format.
pub fn exposition(v: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP stitchfs_info The mount's API version and order.\n# TYPE stitchfs_info gauge\n\
         stitchfs_info{{api=\"{}\",order=\"{}\"}} 1",
        v["api"],
        v["order"].as_str().unwrap_or("")
    );
    for section in ["patches", "journal", "memfs", "domains"] {
        if let Some(m) = v.get(section).and_then(Value::as_object) {
            for (k, x) in m {
                if matches!(k.as_str(), "own_flushes" | "applied" | "absorbed") {
                    continue;
                }
                if let Some(n) = x.as_u64() {
                    let path = format!("{section}.{k}");
                    let gauge = GAUGES.contains(&path.as_str());
                    let name = format!(
                        "stitchfs_{section}_{k}{}",
                        if gauge { "" } else { "_total" }
                    );
                    let kind = if gauge { "gauge" } else { "counter" };
                    let _ = writeln!(
                        out,
                        "# HELP {name} {path} (docs/stats.md)\n# TYPE {name} {kind}\n{name} {n}"
                    );
                }
            }
        }
    }
    if let Some(causes) = v["memfs"]["own_flushes"].as_object() {
        let name = "stitchfs_memfs_own_flushes_total";
        let _ = writeln!(
            out,
            "# HELP {name} Flushes memfs began on its own, by cause.\n# TYPE {name} counter"
        );
        for (cause, n) in causes {
            let _ = writeln!(
                out,
                "{name}{{cause=\"{cause}\"}} {}",
                n.as_u64().unwrap_or(0)
            );
        }
    }
    if let Some(streams) = v["domains"]["by_stream"].as_array() {
        let name = "stitchfs_stream_pending_changes";
        let _ = writeln!(
            out,
            "# HELP {name} Logged changes of each stream not yet flushed.\n# TYPE {name} gauge"
        );
        for st in streams {
            let label = st["name"]
                .as_str()
                .unwrap_or("")
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            let _ = writeln!(
                out,
                "{name}{{stream=\"{label}\"}} {}",
                st["pending_changes"].as_u64().unwrap_or(0)
            );
        }
    }
    for (fate, help) in [
        ("applied", "applied to the disk"),
        ("absorbed", "absorbed by later ones"),
    ] {
        if let Some(kinds) = v["memfs"][fate].as_object() {
            let name = format!("stitchfs_memfs_ops_{fate}_by_kind_total");
            let _ = writeln!(
                out,
                "# HELP {name} Logged operations {help}, by kind.\n# TYPE {name} counter"
            );
            for (kind, n) in kinds {
                let _ = writeln!(out, "{name}{{kind=\"{kind}\"}} {}", n.as_u64().unwrap_or(0));
            }
        }
    }
    let reqs: Vec<(&String, &Value)> = v["requests"]
        .as_object()
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    let family =
        |out: &mut String, name: &str, kind: &str, help: &str, f: &dyn Fn(&Value) -> String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (op, r) in &reqs {
                let _ = writeln!(out, "{name}{{op=\"{op}\"}} {}", f(r));
            }
        };
    let n = |r: &Value, k: &str| r[k].as_u64().unwrap_or(0);
    let secs = |us: u64| format!("{:.6}", us as f64 / 1e6);
    family(
        &mut out,
        "stitchfs_requests_total",
        "counter",
        "FUSE requests served, by opcode.",
        &|r| n(r, "count").to_string(),
    );
    family(
        &mut out,
        "stitchfs_request_errors_total",
        "counter",
        "FUSE requests answered with an error, by opcode.",
        &|r| n(r, "errors").to_string(),
    );
    family(
        &mut out,
        "stitchfs_request_latency_max_seconds",
        "gauge",
        "The longest request of each opcode.",
        &|r| secs(n(r, "max_us")),
    );
    let name = "stitchfs_request_latency_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Request latency by opcode, from the handler's start to its reply.\n\
         # TYPE {name} summary"
    );
    for (op, r) in &reqs {
        let _ = writeln!(
            out,
            "{name}{{op=\"{op}\",quantile=\"0.5\"}} {}",
            secs(n(r, "p50_us"))
        );
        let _ = writeln!(
            out,
            "{name}{{op=\"{op}\",quantile=\"0.99\"}} {}",
            secs(n(r, "p99_us"))
        );
        let _ = writeln!(out, "{name}_sum{{op=\"{op}\"}} {}", secs(n(r, "total_us")));
        let _ = writeln!(out, "{name}_count{{op=\"{op}\"}} {}", n(r, "count"));
    }
    out
}
