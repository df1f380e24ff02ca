//! Benchmark suites of `stitchfs bench`. Each prints figures; none asserts
//! timings (tests never do).

pub mod floor;
pub mod fsck;
pub mod modes;
pub mod mount;
pub mod optimizations;
mod postmark;
pub mod seeds;
mod session;
mod synth;
pub mod systems;
pub mod tree;
