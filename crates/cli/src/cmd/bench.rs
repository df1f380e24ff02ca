//! `stitchfs bench`: benchmark suites.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("no benchmark suites yet")
}
