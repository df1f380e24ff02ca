//! The patches that gave names since mount, while they may not be on
//! disk: for Featherstitch's §4.5 elision (a name removed before its add
//! reached the disk never was there) and for soft-updates rule 3 (a name
//! removed from an inode that keeps others waits for their entries).
//! Memory only; both maps drop what has reached the disk as they grow.

use rustc_hash::FxHashMap;
use std::collections::HashMap;
use stitch_format::{FileType, InodeNo};
use stitch_patch::{PatchCache, PatchId, PatchState};

/// The patch that added a directory entry since mount, and the removals
/// of older names its inode may still have on disk (a rename's source).
type Added = (PatchId, Vec<PatchId>);

/// Names added since mount (see the module comment).
#[derive(Default)]
pub(crate) struct NameAdds {
    /// The patch that added each directory entry since mount, to tell at
    /// removal whether the entry ever reached the disk: if the removal
    /// merged into it, it never did. With it, for a name a rename made,
    /// the removals of the names the inode had before that may still be
    /// on disk (see `never_on_disk`).
    entries: HashMap<(InodeNo, Vec<u8>), Added>,
    /// The patches that gave each non-directory inode a name since mount,
    /// while they may not be on disk: a name removed from an inode that
    /// keeps others waits for them, so no crash leaves it nameless (see
    /// `names_elsewhere`).
    names: FxHashMap<InodeNo, Vec<PatchId>>,
}

impl NameAdds {
    /// How many entry adds are remembered.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Records that `p` added the entry `name` of `dir`.
    pub(crate) fn entry_added(
        &mut self,
        cache: &PatchCache,
        dir: InodeNo,
        name: &[u8],
        p: PatchId,
    ) {
        self.entries.insert((dir, name.to_vec()), (p, Vec::new()));
        self.forget_committed_adds(cache);
    }

    /// Whether the entry `name` of `dir`, just removed by `gone`, never
    /// reached the disk: its removal merged into the still uncommitted patch
    /// that added it (Featherstitch §4.5). Then no state of the disk ever
    /// held the entry, and what the inode's loss of it must wait for is
    /// only the removal of any older name a rename took it from, which may
    /// still be on disk: `Some` of those (empty for a plain create).
    pub(crate) fn never_on_disk(
        &mut self,
        cache: &PatchCache,
        dir: InodeNo,
        name: &[u8],
        gone: &[PatchId],
    ) -> Option<Vec<PatchId>> {
        let (add, before) = self.entries.remove(&(dir, name.to_vec()))?;
        let a = cache.resolve(add)?;
        let g = gone.first().and_then(|&g| cache.resolve(g))?;
        (a == g && cache.state(a) == PatchState::Uncommitted).then_some(before)
    }

    /// Drops the adds that have reached the disk (their entries can no
    /// longer be elided), each time the map reaches a power of two from
    /// 4096 on: otherwise every name made since mount would stay in it.
    fn forget_committed_adds(&mut self, cache: &PatchCache) {
        let n = self.entries.len();
        if n < 4096 || !n.is_power_of_two() {
            return;
        }
        self.entries.retain(|_, (add, _)| {
            cache
                .resolve(*add)
                .is_some_and(|a| cache.state(a) == PatchState::Uncommitted)
        });
    }

    /// Records that `added` gave the inode `ino` (of type `ft`) a name.
    /// Directories have one name and are left out. Each inode's list drops
    /// what has reached the disk as it grows, and the map drops inodes whose
    /// names all have, each time it reaches a power of two from 4096 on.
    pub(crate) fn named(
        &mut self,
        cache: &PatchCache,
        ino: InodeNo,
        ft: FileType,
        added: &[PatchId],
    ) {
        if ft == FileType::Directory || added.is_empty() {
            return;
        }
        let list = self.names.entry(ino).or_default();
        list.retain(|p| cache.resolve(*p).is_some());
        list.extend(added);
        let n = self.names.len();
        if n >= 4096 && n.is_power_of_two() {
            self.names
                .retain(|_, l| l.iter().any(|p| cache.resolve(*p).is_some()));
        }
    }

    /// What removing the name `name` of `dir` from `ino` must wait for: the
    /// patches that gave `ino` its other names, while not on disk. Without
    /// them a crash could keep the removal and lose the other name's entry,
    /// leaving the inode with no name at all (soft-updates rule 3). The
    /// name's own add is left out: a removal that merges into it leaves no
    /// trace on disk (`never_on_disk`). With `links` (its link count) at
    /// one the inode has no other name, and nothing is looked up (most
    /// unlinks).
    pub(crate) fn names_elsewhere(
        &self,
        cache: &PatchCache,
        ino: InodeNo,
        links: u16,
        dir: InodeNo,
        name: &[u8],
    ) -> Vec<PatchId> {
        if links <= 1 {
            return Vec::new();
        }
        let Some(list) = self.names.get(&ino) else {
            return Vec::new();
        };
        let own = self
            .entries
            .get(&(dir, name.to_vec()))
            .and_then(|(p, _)| cache.resolve(*p));
        list.iter()
            .filter_map(|p| cache.resolve(*p))
            .filter(|p| Some(*p) != own)
            .collect()
    }

    /// Records that the entry `name` of `dir`, just added by a rename,
    /// names an inode whose older name goes with `removed` (and, if that
    /// name never reached the disk either, with what it waited for).
    pub(crate) fn renamed_from(
        &mut self,
        dir: InodeNo,
        name: &[u8],
        removed: &[PatchId],
        before: Option<Vec<PatchId>>,
    ) {
        if let Some(added) = self.entries.get_mut(&(dir, name.to_vec())) {
            added.1 = removed
                .iter()
                .copied()
                .chain(before.into_iter().flatten())
                .collect();
        }
    }
}
