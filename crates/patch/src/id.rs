//! Patch identifiers and the arena that owns every live patch.
//!
//! A [`PatchId`] is an index plus a generation. Committed patches are destroyed
//! (Featherstitch §3.5: "committed patches are not tracked"), so a handle whose
//! slot has moved on to a later generation names a patch that has committed.
//! A patch merged into another leaves a *forward* in its slot, so handles the
//! caller kept still reach the merged patch; the forward is freed when the
//! patch it points to commits.
//!
//! Invariant: a slot's generation only grows; a handle never names a newer
//! patch than the one it was issued for.

use crate::patch::Patch;
use std::fmt;

/// Names one patch for as long as it lives, and tells "committed" afterwards.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PatchId {
    pub(crate) index: u32,
    pub(crate) gen: u32,
}

impl fmt::Debug for PatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}.{}", self.index, self.gen)
    }
}

impl fmt::Display for PatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

pub(crate) enum Slot {
    Free { gen: u32, next_free: u32 },
    Live { gen: u32, patch: Patch },
    Forward { gen: u32, to: PatchId },
}

impl Slot {
    fn gen(&self) -> u32 {
        match self {
            Slot::Free { gen, .. } | Slot::Live { gen, .. } | Slot::Forward { gen, .. } => *gen,
        }
    }
}

const NO_FREE: u32 = u32::MAX;

/// The arena of patches. Lookups are O(1); forwards are followed (merges are
/// rarely chained, and each chain ends at a live patch or a freed slot).
pub(crate) struct Arena {
    slots: Vec<Slot>,
    free_head: u32,
    live: usize,
}

impl Arena {
    pub fn new() -> Self {
        Arena {
            slots: Vec::new(),
            free_head: NO_FREE,
            live: 0,
        }
    }

    pub fn live(&self) -> usize {
        self.live
    }

    pub fn insert(&mut self, patch: Patch) -> PatchId {
        self.live += 1;

        if self.free_head != NO_FREE {
            let index = self.free_head;
            let slot = &mut self.slots[index as usize];
            let Slot::Free { gen, next_free } = *slot else {
                unreachable!("free list points at a used slot")
            };
            self.free_head = next_free;
            *slot = Slot::Live {
                gen: gen + 1,
                patch,
            };
            PatchId {
                index,
                gen: gen + 1,
            }
        } else {
            let index = u32::try_from(self.slots.len()).expect("more than 2^32 patches");
            self.slots.push(Slot::Live { gen: 0, patch });
            PatchId { index, gen: 0 }
        }
    }

    /// Follows forwards; `None` means the patch has committed.
    pub fn resolve(&self, mut id: PatchId) -> Option<PatchId> {
        loop {
            let slot = self.slots.get(id.index as usize)?;
            if slot.gen() != id.gen {
                return None;
            }
            match slot {
                Slot::Live { .. } => return Some(id),
                Slot::Forward { to, .. } => id = *to,
                Slot::Free { .. } => return None,
            }
        }
    }

    pub fn get(&self, id: PatchId) -> &Patch {
        match &self.slots[id.index as usize] {
            Slot::Live { gen, patch } if *gen == id.gen => patch,
            _ => panic!("{id:?} is not a live patch"),
        }
    }

    pub fn get_mut(&mut self, id: PatchId) -> &mut Patch {
        match &mut self.slots[id.index as usize] {
            Slot::Live { gen, patch } if *gen == id.gen => patch,
            _ => panic!("{id:?} is not a live patch"),
        }
    }

    /// Turns a live slot into a forward to `to` (after a merge).
    pub fn forward(&mut self, id: PatchId, to: PatchId) -> Patch {
        let slot = std::mem::replace(
            &mut self.slots[id.index as usize],
            Slot::Forward { gen: id.gen, to },
        );
        self.live -= 1;
        match slot {
            Slot::Live { patch, .. } => patch,
            _ => panic!("{id:?} is not a live patch"),
        }
    }

    /// Frees a slot (live or forward); the next use gets a new generation.
    pub fn free(&mut self, id: PatchId) -> Option<Patch> {
        let slot = std::mem::replace(
            &mut self.slots[id.index as usize],
            Slot::Free {
                gen: id.gen,
                next_free: self.free_head,
            },
        );
        self.free_head = id.index;
        match slot {
            Slot::Live { patch, .. } => {
                self.live -= 1;
                Some(patch)
            }
            Slot::Forward { .. } => None,
            Slot::Free { .. } => panic!("{id:?} freed twice"),
        }
    }

    pub fn live_ids(&self) -> impl Iterator<Item = PatchId> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| match s {
            Slot::Live { gen, .. } => Some(PatchId {
                index: i as u32,
                gen: *gen,
            }),
            _ => None,
        })
    }
}
