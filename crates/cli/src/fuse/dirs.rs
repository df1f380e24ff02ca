//! Open directories: each `opendir` takes a snapshot of the listing
//! (with `.` and `..`) and keeps it under its file handle until
//! `releasedir`. The offset of entry `i` is `i + 1`, so a reader that comes
//! back with an offset continues exactly where it stopped, whatever was
//! created, removed or renamed in between (POSIX leaves entries changed
//! after `opendir` unspecified; none is ever shown twice or skipped).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use stitch_memfs::Kind;

/// One entry of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub name: Vec<u8>,
    /// The ext2 inode number.
    pub ino: u64,
    pub kind: Kind,
}

/// The snapshots of open directories, by file handle.
#[derive(Default)]
pub struct DirHandles {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Vec<Slot>>>>,
}

impl DirHandles {
    /// Keeps `listing` under a new handle.
    pub fn insert(&self, listing: Vec<Slot>) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.lock().insert(fh, Arc::new(listing));
        fh
    }

    pub fn get(&self, fh: u64) -> Option<Arc<Vec<Slot>>> {
        self.lock().get(&fh).cloned()
    }

    pub fn remove(&self, fh: u64) {
        self.lock().remove(&fh);
    }

    /// The table, even if a panicking handler poisoned its lock (a panic
    /// never leaves the map half-changed: each use is one map call).
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Vec<Slot>>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The entries after `offset` (an offset the reader was given, or 0), each
/// with the offset that continues after it.
pub fn after(listing: &[Slot], offset: u64) -> impl Iterator<Item = (u64, &Slot)> {
    listing
        .iter()
        .enumerate()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .map(|(i, s)| (i as u64 + 1, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(name: &str, ino: u64) -> Slot {
        Slot {
            name: name.as_bytes().to_vec(),
            ino,
            kind: Kind::File,
        }
    }

    #[test]
    fn offsets_continue_where_the_reader_stopped() {
        let l = vec![slot(".", 2), slot("..", 2), slot("a", 12), slot("b", 13)];
        let all: Vec<_> = after(&l, 0).map(|(o, s)| (o, s.ino)).collect();
        assert_eq!(all, [(1, 2), (2, 2), (3, 12), (4, 13)]);
        let rest: Vec<_> = after(&l, 3).map(|(o, s)| (o, s.ino)).collect();
        assert_eq!(rest, [(4, 13)]);
        assert_eq!(after(&l, 4).count(), 0);
        assert_eq!(after(&l, u64::MAX).count(), 0);
    }

    #[test]
    fn handles_are_distinct_and_released() {
        let h = DirHandles::default();
        let a = h.insert(vec![slot("x", 12)]);
        let b = h.insert(vec![]);
        assert_ne!(a, b);
        assert_eq!(h.get(a).unwrap()[0].ino, 12);
        h.remove(a);
        assert!(h.get(a).is_none());
        assert!(h.get(b).is_some());
    }
}
