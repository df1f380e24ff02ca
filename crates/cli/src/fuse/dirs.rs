//! Open directories: each keeps a snapshot of the listing (with `.` and
//! `..`) under its file handle until `releasedir`. The snapshot is taken by
//! the first `readdir` (and again by one at offset 0, a rewind), not by
//! `opendir`: a directory opened only to be fsynced, as mail servers do
//! after each rename, is never listed, and a listing costs time in the size
//! of the directory. The offset of entry `i` is `i + 1`, so a reader that
//! comes back with an offset continues exactly where it stopped, whatever
//! was created, removed or renamed in between (POSIX leaves entries changed
//! after `opendir` or `rewinddir` unspecified; none is ever shown twice or
//! skipped).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use stitch_memfs::{InodeNo, Kind};

/// One entry of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub name: Vec<u8>,
    /// The ext2 inode number.
    pub ino: InodeNo,
    pub kind: Kind,
}

/// A listing shared by an open directory and the replies that use it.
pub type Listing = Arc<Vec<Slot>>;

/// The open directories, by file handle: `None` until the first `readdir`.
#[derive(Default)]
pub struct DirHandles {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Option<Listing>>>,
}

impl DirHandles {
    /// A new handle, with no listing yet.
    pub fn open(&self) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.lock().insert(fh, None);
        fh
    }

    /// The listing of `fh` for a read at `offset`: the one kept, unless
    /// there is none yet or the read starts over at 0; then `take` makes
    /// one, which is kept. `None` for an unknown handle.
    pub fn listing<E>(
        &self,
        fh: u64,
        offset: u64,
        take: impl FnOnce() -> Result<Vec<Slot>, E>,
    ) -> Option<Result<Listing, E>> {
        match self.lock().get(&fh)? {
            Some(l) if offset != 0 => return Some(Ok(l.clone())),
            _ => {}
        }
        // Taken without the table's lock: a listing can be long, and other
        // handles must not wait for it. The kernel sends one read of a
        // handle at a time, so nothing races for this entry.
        let l = match take() {
            Ok(l) => Arc::new(l),
            Err(e) => return Some(Err(e)),
        };
        let mut open = self.lock();
        let slot = open.get_mut(&fh)?; // released meanwhile
        *slot = Some(l.clone());
        Some(Ok(l))
    }

    pub fn remove(&self, fh: u64) {
        self.lock().remove(&fh);
    }

    /// The table, even if a panicking handler poisoned its lock (a panic
    /// never leaves the map half-changed: each use is one map call).
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Option<Listing>>> {
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

    fn slot(name: &str, ino: u32) -> Slot {
        Slot {
            name: name.as_bytes().to_vec(),
            ino: InodeNo(ino),
            kind: Kind::File,
        }
    }

    #[test]
    fn offsets_continue_where_the_reader_stopped() {
        let l = vec![slot(".", 2), slot("..", 2), slot("a", 12), slot("b", 13)];
        let all: Vec<_> = after(&l, 0).map(|(o, s)| (o, s.ino.0)).collect();
        assert_eq!(all, [(1, 2), (2, 2), (3, 12), (4, 13)]);
        let rest: Vec<_> = after(&l, 3).map(|(o, s)| (o, s.ino.0)).collect();
        assert_eq!(rest, [(4, 13)]);
        assert_eq!(after(&l, 4).count(), 0);
        assert_eq!(after(&l, u64::MAX).count(), 0);
    }

    #[test]
    fn handles_are_distinct_and_released() {
        let h = DirHandles::default();
        let a = h.open();
        let b = h.open();
        assert_ne!(a, b);
        let got = h.listing(a, 0, || Ok::<_, ()>(vec![slot("x", 12)]));
        assert_eq!(got.unwrap().unwrap()[0].ino, InodeNo(12));
        h.remove(a);
        assert!(h.listing(a, 0, || Ok::<_, ()>(vec![])).is_none());
        assert!(h.listing(b, 0, || Ok::<_, ()>(vec![])).is_some());
    }

    #[test]
    fn the_listing_is_taken_at_the_first_read_and_again_at_a_rewind() {
        let h = DirHandles::default();
        let fh = h.open();
        let mut taken = 0;
        let mut read = |offset, names: &[&str]| {
            let l = h.listing(fh, offset, || {
                taken += 1;
                Ok::<_, ()>(names.iter().map(|n| slot(n, 12)).collect())
            });
            let l = l.unwrap().unwrap();
            l.iter()
                .map(|s| String::from_utf8(s.name.clone()).unwrap())
                .collect::<Vec<_>>()
        };
        // Nothing is listed at open; the first read lists what is there then.
        assert_eq!(read(0, &["a", "b"]), ["a", "b"]);
        // A read that continues keeps that snapshot.
        assert_eq!(read(1, &["a", "b", "c"]), ["a", "b"]);
        // A rewind lists again.
        assert_eq!(read(0, &["a", "b", "c"]), ["a", "b", "c"]);
        assert_eq!(taken, 2);
        // A failed listing keeps nothing and reports the error.
        assert_eq!(
            h.listing(fh, 0, || Err("gone")).unwrap().unwrap_err(),
            "gone"
        );
    }
}
