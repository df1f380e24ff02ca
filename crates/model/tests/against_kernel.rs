//! The model against the kernel: seeded random op sequences run on the
//! model and on a fresh real directory. After every op both must give the
//! same result (the same errno, or the same data for reads, listings and
//! stats); every 50 ops and at the end, the whole tree read back from the
//! real directory must equal the model's snapshot.
//!
//! As root every generated op is possible, including chown and device
//! nodes. As another user chown and mknod of devices are refused by the
//! kernel, so chown is not generated and device mknods are expected to
//! differ; this test then only runs as root.

mod common;

use proptest::prelude::*;
use stitch_model::real::RealFs;
use stitch_model::{ops, GenConfig, Limits, Model, Tree, TreeOptions};

const OPS_PER_CASE: usize = 300;

fn run(seed: u64) -> Result<(), TestCaseError> {
    let dir = stitch_testkit::scratch();
    common::set_root_perm(dir.path(), 0o755);
    let mut real = RealFs::new(dir.path());
    let mut model = Model::new(0o755, common::me(), Limits::default());
    let script = ops(seed, OPS_PER_CASE, &GenConfig::default());
    for (step, op) in script.iter().enumerate() {
        model.set_now(stitch_model::Time::from_secs(step as i64));
        let want = model.apply(op);
        model.check();
        let got = real.apply(op);
        prop_assert_eq!(&got, &want, "seed {} step {}: {:?}", seed, step, op);
        if step % 50 == 49 || step + 1 == script.len() {
            let tree = Tree::from_dir(dir.path(), TreeOptions::default()).unwrap();
            let diff = tree.diff(&model.snapshot());
            prop_assert!(diff.is_empty(), "seed {} step {}: {:#?}", seed, step, diff);
        }
    }
    Ok(())
}

/// 64 cases, or `STITCH_MODEL_CASES` for a longer soak.
fn cases() -> u32 {
    let soak = std::env::var("STITCH_MODEL_CASES").ok();
    soak.and_then(|s| s.parse().ok()).unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        // The failing seed is in the message; no regression file to manage.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn model_matches_kernel(seed in any::<u64>()) {
        // SAFETY: reads the process's effective uid.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root for chown and device nodes");
            return Ok(());
        }
        run(seed)?;
    }
}
