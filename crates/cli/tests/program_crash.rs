//! `stitchfs crashtest --program`: real programs crash-tested through the
//! mount. The instrument must not be blind: a program that promises what
//! it never made durable is caught, the async control shows damage, a
//! saved state judges the same again, and short runs of built-in programs
//! in the modes that promise consistency find none. Needs root, FUSE and
//! python3 (scripts/setup.sh installs what is missing).

use std::path::Path;
use std::process::{Command, Output};

fn stitchfs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stitchfs"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `stitchfs crashtest ARGS --out OUT`: its output, exit code and
/// report.json.
fn crashtest(args: &[&str], out: &Path) -> (String, Option<i32>, serde_json::Value) {
    let mut argv = vec!["crashtest"];
    argv.extend(args);
    argv.extend(["--out", out.to_str().unwrap()]);
    let o = stitchfs(&argv);
    let report = std::fs::read_to_string(out.join("report.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or_default();
    (text(&o), o.status.code(), report)
}

/// Saved states under `out`: directories holding a state.json.
fn saved(out: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(out)
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().path())
        .filter(|d| d.join("state.json").is_file())
        .collect()
}

/// A workload that says "written" without an fsync, and a checker that
/// holds it to that: some crash after the line must lose the file.
#[test]
fn a_program_promising_what_it_never_synced_is_caught_and_replayed() {
    let dir = stitch_testkit::scratch();
    let w = dir.path().join("workload.sh");
    let c = dir.path().join("check.sh");
    std::fs::write(
        &w,
        "#!/bin/sh\nmkdir d\nprintf hello > d/f\necho written\nsleep 1\nprintf more > d/g\n",
    )
    .unwrap();
    std::fs::write(
        &c,
        "#!/bin/sh\nif grep -qx written \"$STITCH_PROMISES\" && ! grep -qx hello d/f 2>/dev/null; \
         then echo 'durability: d/f lost after written'; exit 1; fi\n",
    )
    .unwrap();
    for f in [&w, &c] {
        Command::new("chmod").arg("+x").arg(f).status().unwrap();
    }
    let out = dir.path().join("out");
    let (said, code, _) = crashtest(
        &[
            "--workload-script",
            w.to_str().unwrap(),
            "--checker-script",
            c.to_str().unwrap(),
            "--mode",
            "journal",
            "--data",
            "ordered",
            "--seed",
            "3",
        ],
        &out,
    );
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("durability"), "{said}");
    let states = saved(&out);
    assert!(!states.is_empty(), "nothing saved: {said}");
    for f in ["crash.img", "promises", "reproduce"] {
        assert!(states[0].join(f).is_file(), "{f} not saved");
    }
    let again = stitchfs(&["crashtest", "--replay", states[0].to_str().unwrap()]);
    let verdict = text(&again);
    assert_eq!(again.status.code(), Some(1), "{verdict}");
    assert!(
        verdict.contains("inconsistent: durability: d/f lost after written"),
        "{verdict}"
    );
    assert!(out.join("report.md").is_file() && out.join("report.json").is_file());
}

/// The async control must show damage the modes that order writes never
/// show: a run that found none there would mean a blind instrument.
#[test]
fn the_async_control_shows_damage() {
    let dir = stitch_testkit::scratch();
    let out = dir.path().join("out");
    let (said, code, report) = crashtest(
        &[
            "--program",
            "replace",
            "--mode",
            "async",
            "--max-states",
            "2",
            "--sample",
            "40",
            "--seed",
            "1",
        ],
        &out,
    );
    // Async is the control: its damage does not fail the run.
    assert_eq!(code, Some(0), "{said}");
    let bad: u64 = report[0]["inconsistent"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(bad > 0, "async showed no damage:\n{said}");
    assert!(!saved(&out).is_empty());
}

/// Short runs of built-in programs where the mode promises what they
/// rely on: every sampled crash state consistent.
#[test]
fn built_in_programs_stay_consistent_in_ordered_modes() {
    let dir = stitch_testkit::scratch();
    let out = dir.path().join("out");
    let (said, code, report) = crashtest(
        &[
            "--program",
            "replace,maildir,sqlite-rollback",
            "--mode",
            "softupdates",
            "--max-states",
            "2",
            "--sample",
            "12",
            "--seed",
            "5",
        ],
        &out,
    );
    assert_eq!(code, Some(0), "{said}");
    let rows = report.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{said}");
    for r in rows {
        assert_eq!(r["states"].as_u64(), Some(12), "{r}");
        assert_eq!(r["consistent"].as_u64(), Some(12), "{r}");
    }
}

/// `stitchfs depend "gzip -k big" "rm big"` in soft updates: every
/// sampled crash state holds each file whole, as the original or as a
/// whole compressed copy; the same two commands run plainly one after
/// the other (the control) lose both in some.
#[test]
fn depend_keeps_a_file_somewhere_where_plain_commands_lose_it() {
    let dir = stitch_testkit::scratch();
    let out = dir.path().join("out");
    let (said, code, report) = crashtest(
        &[
            "--program",
            "depend-gzip,gzip-rm",
            "--mode",
            "softupdates",
            "--sample",
            "60",
            "--seed",
            "1",
        ],
        &out,
    );
    // gzip-rm's damage is real (not the control mode): the run fails.
    assert_eq!(code, Some(1), "{said}");
    let rows = report
        .as_array()
        .unwrap_or_else(|| panic!("no report:\n{said}"));
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["program"] == name)
            .unwrap_or_else(|| panic!("no {name} in {said}"))
    };
    let d = row("depend-gzip");
    assert_eq!(d["states"].as_u64(), Some(60), "{d}");
    assert_eq!(d["consistent"].as_u64(), Some(60), "{d}");
    let order = row("gzip-rm")["inconsistent"]["order"]
        .as_u64()
        .unwrap_or(0);
    assert!(order > 0, "the control lost nothing:\n{said}");
}

/// A program under `stitchfs xsync` that prints "committed N" after
/// writing, fsyncing, renaming and logging record N: in every sampled
/// crash state of soft updates and journal (ordered) mode, every line it
/// showed before the crash is true, though its fsyncs returned at once.
/// The same program alone without its fsyncs (the control) shows lines a
/// crash undoes.
#[test]
fn xsync_never_shows_a_line_a_crash_undoes() {
    let dir = stitch_testkit::scratch();
    for (mode, programs) in [
        ("softupdates", "xsync-log,log-nofsync"),
        ("journal", "xsync-log"),
    ] {
        let out = dir.path().join(mode);
        let args = [
            "--program",
            programs,
            "--mode",
            mode,
            "--sample",
            "40",
            "--seed",
            "2",
        ];
        let (said, code, report) = crashtest(&args, &out);
        let rows = report.as_array().unwrap();
        let of = |name: &'static str| rows.iter().find(move |r| r["program"] == name);
        let x = of("xsync-log").unwrap_or_else(|| panic!("{said}"));
        assert_eq!(x["states"].as_u64(), Some(40), "{x}");
        assert_eq!(x["consistent"].as_u64(), Some(40), "{x}");
        if programs.contains("log-nofsync") {
            assert_eq!(code, Some(1), "the control's damage fails the run: {said}");
            let lost = of("log-nofsync").unwrap()["inconsistent"]["durability"]
                .as_u64()
                .unwrap_or(0);
            assert!(lost > 0, "the control lost nothing:\n{said}");
        } else {
            assert_eq!(code, Some(0), "{said}");
        }
    }
}
