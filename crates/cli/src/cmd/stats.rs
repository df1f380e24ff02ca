//! `stitchfs stats MOUNTPOINT [--json] [--watch SECONDS]`: a live mount's
//! figures, read over the control table (`IOC_STATS`): the patch cache's
//! counters, memfs's flushes and memory, the journal, the requests served
//! by opcode with their latency, and the ordering domains. The JSON field
//! names are in docs/stats.md.

use anyhow::{bail, Context};
use serde_json::Value;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// The mount point (or any file or directory on the mount)
    pub path: PathBuf,
    /// Print the figures as one JSON object (with --watch, one per line)
    #[arg(long)]
    pub json: bool,
    /// Print them again every SECONDS until interrupted, with the rates of
    /// the counters over the last interval
    #[arg(long, value_name = "SECONDS")]
    pub watch: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Some(every) = args.watch else {
        let now = read(&args.path)?;
        return print(&now, None, &args);
    };
    if !(every.is_finite() && every > 0.0) {
        bail!("--watch takes a positive number of seconds, not {every}");
    }
    let every = Duration::from_secs_f64(every);
    let mut before: Option<Value> = None;
    loop {
        let now = read(&args.path)?;
        if !args.json && std::io::stdout().is_terminal() {
            print!("\x1b[H\x1b[2J");
        }
        print(&now, before.as_ref().map(|b| (b, every)), &args)?;
        std::io::stdout().flush()?;
        before = Some(now);
        std::thread::sleep(every);
    }
}

/// The figures of the mount `path` is on.
pub fn read(path: &Path) -> anyhow::Result<Value> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let text = match stitch_control::request_stats(&f) {
        Ok(Some(t)) => t,
        Ok(None) => bail!(
            "{} is not on a stitchfs mount (or its server predates `stats`)",
            path.display()
        ),
        Err(e) => {
            return Err(e).with_context(|| format!("reading the figures of {}", path.display()))
        }
    };
    serde_json::from_str(&text).context("the server's figures are not JSON")
}

fn print(now: &Value, before: Option<(&Value, Duration)>, args: &Args) -> anyhow::Result<()> {
    if args.json {
        println!("{now}");
        return Ok(());
    }
    print!("{}", render(now, before));
    Ok(())
}

fn num(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The figures as text; with `before` (and the time between), the
/// rates of the counters that moved.
pub fn render(now: &Value, before: Option<(&Value, Duration)>) -> String {
    let mut out = String::new();
    let rate = |path: &[&str]| -> String {
        match before {
            Some((b, d)) => {
                let delta = num(now, path).saturating_sub(num(b, path));
                format!(" ({:.0}/s)", delta as f64 / d.as_secs_f64())
            }
            None => String::new(),
        }
    };
    let line = |out: &mut String, label: &str, path: &[&str], with_rate: bool| {
        let r = if with_rate { rate(path) } else { String::new() };
        out.push_str(&format!("  {label:<28} {}{r}\n", num(now, path)));
    };
    out.push_str(&format!(
        "order: {}\n",
        now.get("order").and_then(Value::as_str).unwrap_or("?")
    ));
    out.push_str("memory\n");
    line(&mut out, "dirty bytes", &["memfs", "dirty_bytes"], false);
    line(&mut out, "dirty inodes", &["memfs", "dirty_inodes"], false);
    line(&mut out, "pages in memory", &["memfs", "pages"], false);
    out.push_str("flushes\n");
    line(&mut out, "flushes", &["memfs", "flushes"], true);
    for cause in ["periodic", "write_behind", "pressure", "room", "settle"] {
        line(
            &mut out,
            &format!("  begun: {}", cause.replace('_', "-")),
            &["memfs", "own_flushes", cause],
            true,
        );
    }
    line(
        &mut out,
        "operations applied",
        &["memfs", "ops_applied"],
        true,
    );
    line(
        &mut out,
        "operations absorbed",
        &["memfs", "ops_absorbed"],
        true,
    );
    line(
        &mut out,
        "fsyncs with nothing to do",
        &["memfs", "fsync_noops"],
        true,
    );
    line(
        &mut out,
        "fsyncs ignored (streams)",
        &["memfs", "fsyncs_ignored"],
        true,
    );
    out.push_str("fsync latency\n");
    line(&mut out, "count", &["fsync", "count"], true);
    for (label, key) in [
        ("median (us)", "p50_us"),
        ("99th pct (us)", "p99_us"),
        ("max (us)", "max_us"),
    ] {
        line(&mut out, label, &["fsync", key], false);
    }
    out.push_str("patches\n");
    for (label, key) in [
        ("created", "created"),
        ("merged", "merged"),
        ("hard (no undo data)", "created_hard"),
        ("rollbacks", "rollbacks"),
        ("blocks written", "blocks_written"),
        ("device flushes", "device_flushes"),
    ] {
        line(&mut out, label, &["patches", key], true);
    }
    for (label, key) in [
        ("live patches", "live_patches"),
        ("undo bytes live", "undo_bytes_live"),
        ("dirty blocks", "dirty_blocks"),
    ] {
        line(&mut out, label, &["patches", key], false);
    }
    if now.get("journal").is_some_and(|j| !j.is_null()) {
        out.push_str("journal\n");
        line(&mut out, "transactions", &["journal", "commits"], true);
        line(&mut out, "log blocks", &["journal", "log_blocks"], true);
        line(
            &mut out,
            "waits for log space",
            &["journal", "space_waits"],
            true,
        );
    }
    out.push_str("domains\n");
    line(&mut out, "streams", &["domains", "streams"], false);
    line(
        &mut out,
        "changes pending",
        &["domains", "pending_changes"],
        false,
    );
    for st in now["domains"]["by_stream"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "    {:<26} {} pending\n",
            st["name"].as_str().unwrap_or("?"),
            st["pending_changes"].as_u64().unwrap_or(0)
        ));
    }
    line(
        &mut out,
        "patchgroups alive",
        &["domains", "patchgroups"],
        false,
    );
    line(
        &mut out,
        "  engaged",
        &["domains", "patchgroups_engaged"],
        false,
    );
    line(
        &mut out,
        "  sealed",
        &["domains", "patchgroups_sealed"],
        false,
    );
    line(
        &mut out,
        "  changes pending",
        &["domains", "patchgroup_pending_changes"],
        false,
    );
    line(
        &mut out,
        "processes with a context",
        &["domains", "contexts"],
        false,
    );
    if now.get("xsync").is_some_and(|x| !x.is_null()) {
        out.push_str("external synchrony\n");
        line(&mut out, "groups alive", &["xsync", "groups"], false);
        for (label, key) in [
            ("commits", "commits"),
            ("  that flushed", "commits_flushed"),
            ("syncs returned at once", "syncs_returned"),
            ("outside requests held", "observers_held"),
        ] {
            line(&mut out, label, &["xsync", key], true);
        }
        line(
            &mut out,
            "output held (bytes)",
            &["xsync", "held_bytes"],
            false,
        );
        line(&mut out, "  most held", &["xsync", "max_held_bytes"], false);
    }
    out.push_str(&format!(
        "requests\n  {:<12} {:>10} {:>7} {:>10} {:>10} {:>10}\n",
        "opcode", "count", "errors", "p50 (us)", "p99 (us)", "max (us)"
    ));
    if let Some(reqs) = now.get("requests").and_then(Value::as_object) {
        let mut rows: Vec<(&String, &Value)> = reqs.iter().collect();
        rows.sort_by_key(|(_, v)| std::cmp::Reverse(num(v, &["count"])));
        for (op, v) in rows {
            out.push_str(&format!(
                "  {op:<12} {:>10} {:>7} {:>10} {:>10} {:>10}{}\n",
                num(v, &["count"]),
                num(v, &["errors"]),
                num(v, &["p50_us"]),
                num(v, &["p99_us"]),
                num(v, &["max_us"]),
                rate(&["requests", op, "count"])
            ));
        }
    }
    out
}
