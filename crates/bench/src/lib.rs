//! Benchmark suites of `stitchfs bench`. Each prints figures; none asserts
//! timings (tests never do).
//!
//! Suites: `optimizations` (Featherstitch Figure 9, in memory), `modes`
//! (Featherstitch Figure 10 and Seltzer's tables, in process), `fsck`,
//! `mount` (McoreFS §6 through a real mount) and `seeds` (every seed
//! paper's experiment through real mounts). The mount-based suites share
//! `systems` (how each file system under test is made, mounted and
//! measured), `workload` (one workload on one system, timed phase by
//! phase), `session` (a suite run over its systems, run after run) and
//! `report` (cells from the runs: medians, ratios taken run by run, the
//! report's common parts); every suite writes Markdown with `markdown`,
//! and `plot` draws a suite's JSON with `scripts/plot.py`.
//!
//! Architecture invariant: benchmarks measure the stack through its public
//! interfaces (the library crates, or the `stitchfs` binary for mounts);
//! they add no file-system logic of their own.

pub mod fsck;
mod markdown;
pub mod modes;
pub mod mount;
pub mod optimizations;
pub mod plot;
mod postmark;
mod report;
pub mod seeds;
mod session;
mod synth;
pub mod systems;
pub mod tree;
mod workload;
