//! One module per subcommand; each exposes `Args` (clap) and `run`.

pub mod bench;
pub mod fsck;
pub mod mkfs;
pub mod mount;
