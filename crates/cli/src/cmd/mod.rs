//! One module per subcommand; each exposes `Args` (clap) and `run`.

pub mod bench;
pub mod crashtest;
pub mod depend;
pub mod fsck;
pub mod graph;
pub mod mkfs;
pub mod mount;
pub mod programs;
pub mod run;
pub mod stats;
pub mod sync;
pub mod top;
pub mod umount;
pub mod xsync;
