//! `stitchfs top MOUNTPOINT`: a terminal dashboard of a live mount,
//! redrawn every second from the figures `stitchfs stats` reads: request
//! and operation rates, dirty data, flushes and their causes, fsync
//! latency, the patch cache, the journal, the ordering domains, and the
//! requests by opcode. Keys: `s` changes the table's order (rate, count,
//! 99th percentile), `q` or Esc quits.

use super::stats::read;
use anyhow::{bail, Context};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use ratatui::Frame;
use serde_json::Value;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// The mount point (or any file or directory on the mount)
    pub path: PathBuf,
    /// Seconds between refreshes
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    pub interval: f64,
}

/// How the requests table is ordered.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sort {
    Rate,
    Count,
    P99,
}

impl Sort {
    fn next(self) -> Sort {
        match self {
            Sort::Rate => Sort::Count,
            Sort::Count => Sort::P99,
            Sort::P99 => Sort::Rate,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Sort::Rate => "rate",
            Sort::Count => "count",
            Sort::P99 => "p99",
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !(args.interval.is_finite() && args.interval > 0.0) {
        bail!(
            "--interval takes a positive number of seconds, not {}",
            args.interval
        );
    }
    if !std::io::stdout().is_terminal() {
        bail!("top needs a terminal; `stitchfs stats --watch SECONDS` prints the figures anywhere");
    }
    let every = Duration::from_secs_f64(args.interval);
    // The figures are read once before the screen is taken, so a path off
    // any mount is a plain error on a plain terminal.
    let first = read(&args.path)?;
    let mut terminal = ratatui::init();
    let result = dashboard(&mut terminal, &args, first, every);
    ratatui::restore();
    result
}

fn dashboard(
    terminal: &mut ratatui::DefaultTerminal,
    args: &Args,
    first: Value,
    every: Duration,
) -> anyhow::Result<()> {
    let mut sort = Sort::Rate;
    let mut before: Option<(Value, Instant)> = None;
    let mut now = (first, Instant::now());
    loop {
        let view = View {
            path: args.path.display().to_string(),
            now: &now.0,
            before: before.as_ref().map(|(v, t)| (v, now.1.duration_since(*t))),
            sort,
        };
        terminal.draw(|f| view.draw(f)).context("drawing")?;
        let due = now.1 + every;
        // Keys until the next refresh.
        loop {
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() || !event::poll(left).context("reading keys")? {
                break;
            }
            if let Event::Key(k) = event::read().context("reading keys")? {
                if k.kind != KeyEventKind::Press {
                    continue;
                }
                match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                    KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                        return Ok(())
                    }
                    KeyCode::Char('s') => {
                        sort = sort.next();
                        break;
                    }
                    _ => {}
                }
            }
        }
        if Instant::now() >= due {
            let next = (read(&args.path)?, Instant::now());
            before = Some(std::mem::replace(&mut now, next));
        }
    }
}

/// One opcode's line of the requests table.
struct OpRow {
    op: String,
    count: u64,
    /// Over the last interval (none before the first refresh).
    rate: Option<f64>,
    errors: u64,
    p50_us: u64,
    p99_us: u64,
    max_us: u64,
}

/// One screen's worth: the figures now and, after the first refresh,
/// those of the one before.
struct View<'a> {
    path: String,
    now: &'a Value,
    before: Option<(&'a Value, Duration)>,
    sort: Sort,
}

fn num(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// Bytes in a short human unit.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

/// Microseconds in a short human unit.
fn micros(us: u64) -> String {
    match us {
        0..1_000 => format!("{us} µs"),
        1_000..1_000_000 => format!("{:.1} ms", us as f64 / 1e3),
        _ => format!("{:.2} s", us as f64 / 1e6),
    }
}

impl View<'_> {
    /// The rate of the counter at `path` over the last interval.
    fn rate(&self, path: &[&str]) -> Option<f64> {
        let (b, d) = self.before?;
        let delta = num(self.now, path).saturating_sub(num(b, path));
        Some(delta as f64 / d.as_secs_f64().max(1e-3))
    }

    fn per_s(&self, path: &[&str]) -> String {
        match self.rate(path) {
            Some(r) => format!("{r:.0}/s"),
            None => "–".into(),
        }
    }

    fn requests(&self) -> Vec<OpRow> {
        let mut rows: Vec<OpRow> = self
            .now
            .get("requests")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(op, r)| OpRow {
                op: op.clone(),
                count: num(r, &["count"]),
                rate: self.rate(&["requests", op, "count"]),
                errors: num(r, &["errors"]),
                p50_us: num(r, &["p50_us"]),
                p99_us: num(r, &["p99_us"]),
                max_us: num(r, &["max_us"]),
            })
            .collect();
        match self.sort {
            Sort::Rate => rows.sort_by(|a, b| {
                b.rate
                    .unwrap_or(0.0)
                    .total_cmp(&a.rate.unwrap_or(0.0))
                    .then(b.count.cmp(&a.count))
            }),
            Sort::Count => rows.sort_by_key(|r| std::cmp::Reverse(r.count)),
            Sort::P99 => rows.sort_by_key(|r| std::cmp::Reverse(r.p99_us)),
        }
        rows
    }

    fn draw(&self, f: &mut Frame) {
        let [head, top, table] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(9),
            Constraint::Min(3),
        ])
        .areas(f.area());
        let total_rate: f64 = self.requests().iter().filter_map(|r| r.rate).sum();
        f.render_widget(
            Paragraph::new(Line::from(format!(
                "stitchfs top {}  order {}  requests {}  [s] sort: {}  [q] quit",
                self.path,
                self.now["order"].as_str().unwrap_or("?"),
                if self.before.is_some() {
                    format!("{total_rate:.0}/s")
                } else {
                    "–".into()
                },
                self.sort.name()
            )))
            .style(Style::default().add_modifier(Modifier::REVERSED)),
            head,
        );
        let [left, mid, right] = Layout::horizontal([
            Constraint::Ratio(1, 3),
            Constraint::Ratio(1, 3),
            Constraint::Ratio(1, 3),
        ])
        .areas(top);
        let memfs = [
            format!(
                "dirty      {}",
                bytes(num(self.now, &["memfs", "dirty_bytes"]))
            ),
            format!("dirty files {}", num(self.now, &["memfs", "dirty_inodes"])),
            format!(
                "in memory  {}",
                bytes(num(self.now, &["memfs", "pages"]) * 4096)
            ),
            format!(
                "flushes    {} ({})",
                num(self.now, &["memfs", "flushes"]),
                self.per_s(&["memfs", "flushes"])
            ),
            format!("ops applied {}", self.per_s(&["memfs", "ops_applied"])),
            format!(
                "begun: periodic {} behind {}",
                num(self.now, &["memfs", "own_flushes", "periodic"]),
                num(self.now, &["memfs", "own_flushes", "write_behind"]),
            ),
            format!(
                "  pressure {} room {} settle {}",
                num(self.now, &["memfs", "own_flushes", "pressure"]),
                num(self.now, &["memfs", "own_flushes", "room"]),
                num(self.now, &["memfs", "own_flushes", "settle"]),
            ),
        ];
        let fsync = [
            format!(
                "fsyncs     {} ({})",
                num(self.now, &["fsync", "count"]),
                self.per_s(&["fsync", "count"])
            ),
            format!("median     {}", micros(num(self.now, &["fsync", "p50_us"]))),
            format!("99th pct   {}", micros(num(self.now, &["fsync", "p99_us"]))),
            format!("max        {}", micros(num(self.now, &["fsync", "max_us"]))),
            format!(
                "streams    {} ({} changes pending)",
                num(self.now, &["domains", "streams"]),
                num(self.now, &["domains", "pending_changes"])
            ),
            format!(
                "groups     {} ({} changes pending)",
                num(self.now, &["domains", "patchgroups"]),
                num(self.now, &["domains", "patchgroup_pending_changes"])
            ),
            format!("contexts   {}", num(self.now, &["domains", "contexts"])),
        ];
        let mut patches = vec![
            format!("live       {}", num(self.now, &["patches", "live_patches"])),
            format!("dirty blks {}", num(self.now, &["patches", "dirty_blocks"])),
            format!(
                "undo live  {}",
                bytes(num(self.now, &["patches", "undo_bytes_live"]))
            ),
            format!("blocks out {}", self.per_s(&["patches", "blocks_written"])),
            format!("dev flushes {}", self.per_s(&["patches", "device_flushes"])),
        ];
        if self.now["journal"].is_object() {
            patches.push(format!(
                "journal tx {}",
                self.per_s(&["journal", "commits"])
            ));
        }
        for (area, title, lines) in [
            (left, "memory and flushes", memfs.to_vec()),
            (mid, "fsync and domains", fsync.to_vec()),
            (right, "patches", patches),
        ] {
            f.render_widget(
                Paragraph::new(lines.into_iter().map(Line::from).collect::<Vec<_>>())
                    .block(Block::default().borders(Borders::ALL).title(title)),
                area,
            );
        }
        let rows = self.requests().into_iter().map(|r| {
            Row::new(vec![
                r.op,
                r.rate.map_or("–".into(), |x| format!("{x:.0}")),
                r.count.to_string(),
                r.errors.to_string(),
                micros(r.p50_us),
                micros(r.p99_us),
                micros(r.max_us),
            ])
        });
        let widths = [
            Constraint::Length(12),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(7),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
        ];
        f.render_widget(
            Table::new(rows, widths)
                .header(
                    Row::new(vec![
                        "opcode", "rate/s", "count", "errors", "p50", "p99", "max",
                    ])
                    .style(Style::default().add_modifier(Modifier::BOLD)),
                )
                .block(Block::default().borders(Borders::ALL).title("requests")),
            table,
        );
    }
}
