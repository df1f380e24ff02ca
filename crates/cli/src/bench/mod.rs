//! Benchmark suites of `stitchfs bench`. Each prints figures; none asserts
//! timings (tests never do).

pub mod optimizations;
mod synth;
