//! The failure latch: after the first failed write or flush, a device refuses
//! all further I/O (lib.rs invariant; docs/design.md: "A failed device write or
//! flush is never hidden: the error is latched").
//!
//! Why latch instead of retry: after a failed `fsync` the kernel may have
//! dropped the dirty pages, so a retry that "succeeds" would claim durability
//! for data that is gone (the PostgreSQL fsync lesson). The first error is
//! kept as text because `io::Error` is not `Clone`.

use std::sync::Mutex;

use crate::DevError;

/// Holds the description of the first failure, if any.
#[derive(Debug, Default)]
pub struct Latch {
    first: Mutex<Option<String>>,
}

impl Latch {
    pub fn new() -> Self {
        Latch::default()
    }

    /// `Err(Latched)` once a failure was recorded.
    pub fn check(&self) -> Result<(), DevError> {
        match &*self.lock() {
            Some(first) => Err(DevError::Latched {
                first: first.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Records `err` if it is the first failure and hands it back, so the
    /// call that failed reports the real error and later calls report
    /// `Latched`.
    pub fn trip(&self, err: DevError) -> DevError {
        let mut first = self.lock();
        if first.is_none() {
            *first = Some(err.to_string());
        }
        err
    }

    /// The first failure's description, if the latch has tripped.
    pub fn first(&self) -> Option<String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // A panic while holding this lock cannot leave the Option half
        // written, so a poisoned lock still holds a valid value.
        self.first.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_error_only() {
        let latch = Latch::new();
        assert!(latch.check().is_ok());
        let e1 = DevError::BadGeometry {
            reason: "first".into(),
        };
        let e2 = DevError::BadGeometry {
            reason: "second".into(),
        };
        assert!(matches!(latch.trip(e1), DevError::BadGeometry { .. }));
        latch.trip(e2);
        match latch.check() {
            Err(DevError::Latched { first }) => assert!(first.contains("first"), "{first}"),
            other => panic!("expected Latched, got {other:?}"),
        }
    }
}
