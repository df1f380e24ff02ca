//! The checker's progress as a bar on stderr, only when stderr is a
//! terminal: `stitchfs fsck`, and `stitchfs mount` checking an image left
//! unclean, which on a large image takes a while.

use anyhow::Context;
use std::io::IsTerminal;
use stitch_fsck::Phase;

/// A bar on stderr, only when stderr is a terminal.
pub fn bar() -> anyhow::Result<Option<indicatif::ProgressBar>> {
    if !std::io::stderr().is_terminal() {
        return Ok(None);
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>16} [{bar:40}] {pos}/{len}")
            .context("progress bar template")?
            .progress_chars("=> "),
    );
    Ok(Some(bar))
}

/// Shows where the checker is on `bar`, if there is one.
pub fn show(bar: &Option<indicatif::ProgressBar>, phase: Phase, done: u64, total: u64) {
    if let Some(bar) = bar {
        bar.set_message(phase.label());
        bar.set_length(total);
        bar.set_position(done);
    }
}

/// Takes the bar off the terminal.
pub fn clear(bar: &Option<indicatif::ProgressBar>) {
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

/// A bar on stderr drawn with `template` when stderr is a terminal, and
/// hidden otherwise (a caller may still print lines of its own then).
pub fn bar_with(template: &str) -> anyhow::Result<indicatif::ProgressBar> {
    let bar = indicatif::ProgressBar::new(0);
    if std::io::stderr().is_terminal() {
        bar.set_style(
            indicatif::ProgressStyle::with_template(template).context("progress template")?,
        );
    } else {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    Ok(bar)
}
