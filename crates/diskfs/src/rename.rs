//! `rename` and `renameat2` (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`).
//!
//! Errors are decided in Linux's order (the reference model's order, which
//! the model-based tests hold us to): both flags; the source name, then the
//! destination name; `NOREPLACE` over an existing name; a directory moving
//! into its own subtree; the same inode at both ends (success, no change);
//! a type mismatch; the new parent's link limit; a non-empty directory
//! replaced.
//!
//! Soft-updates order (rule 3: never reset the last pointer to a live
//! resource before the new one is set):
//! - a non-directory: its link count goes up, the new entry is set (added, or
//!   an existing entry retargeted in place), then the old entry is removed,
//!   then the count comes down; a replaced inode loses its link after the
//!   entry stops naming it (deleted with its last link, which the rename
//!   does not wait for: see `DiskFs::drop_name`). A crash leaves at most a
//!   count too high. The rename's patch stands for the tree (the count up,
//!   both entries), not for the count coming down: that follows the old
//!   entry's removal to the disk with a later write, so a sync of the
//!   rename takes three device flushes instead of four, and a crash before
//!   the count's write leaves it one too high, a leak.
//! - a directory: two entries naming one directory is corruption on disk,
//!   so here the old entry goes first and the new one follows; a crash in
//!   between leaves the directory unconnected (a leak: fsck reconnects it).
//!   The new parent's count goes up before the directory's `..` names it,
//!   the old parent's comes down after.

use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, LINK_MAX};
use crate::Refusal;
use stitch_format::dir::set_inode;
use stitch_format::inode::TimeField;
use stitch_format::{FileType, InodeNo, Timestamp};
use stitch_patch::PatchId;

/// `renameat2` flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

/// The two names a rename involves: `sn` in directory `sp` (the source)
/// and `dn` in `dp` (the destination).
#[derive(Clone, Copy)]
struct Names<'a> {
    sp: InodeNo,
    sn: &'a [u8],
    dp: InodeNo,
    dn: &'a [u8],
}

impl DiskFs {
    /// Renames `sp/sn` to `dp/dn`.
    pub fn rename(
        &mut self,
        sp: InodeNo,
        sn: &[u8],
        dp: InodeNo,
        dn: &[u8],
        flags: RenameFlags,
        now: Timestamp,
    ) -> Result<PatchId> {
        if flags.noreplace && flags.exchange {
            return Err(DiskError::Refused(Refusal::Invalid(
                "RENAME_NOREPLACE with RENAME_EXCHANGE",
            )));
        }
        let src = self
            .lookup(sp, sn)?
            .ok_or(DiskError::Refused(Refusal::NotFound))?
            .ino;
        let dst = self.lookup(dp, dn)?.map(|e| e.ino);
        if flags.noreplace && dst.is_some() {
            return Err(DiskError::Refused(Refusal::Exists));
        }
        if flags.exchange {
            let dst = dst.ok_or(DiskError::Refused(Refusal::NotFound))?;
            return self.exchange(Names { sp, sn, dp, dn }, src, dst, now);
        }
        crate::dir::check_name(dn)?;
        let src_dir = self.read_inode(src)?.is_dir();
        if src_dir && self.is_ancestor_or_self(src, dp)? {
            return Err(DiskError::Refused(Refusal::Invalid(
                "directory moved into itself",
            )));
        }
        if let Some(d) = dst {
            if self.read_inode(d)?.is_dir() && self.is_ancestor_or_self(d, sp)? {
                return Err(DiskError::Refused(Refusal::NotEmpty));
            }
        }
        if dst == Some(src) {
            return Ok(self.m.group(&[])?);
        }
        self.check_replace(src_dir, dst, sp, dp)?;
        let names = Names { sp, sn, dp, dn };
        let ps = if src_dir {
            self.move_dir(names, src, dst, now)?
        } else {
            self.move_file(names, src, dst, now)?
        };
        Ok(self.m.group(&ps)?)
    }

    /// Is `a` the directory `d` or one of its ancestors?
    fn is_ancestor_or_self(&mut self, a: InodeNo, mut d: InodeNo) -> Result<bool> {
        for _ in 0..65_536 {
            if d == a {
                return Ok(true);
            }
            if d == self.root() {
                return Ok(false);
            }
            d = self
                .lookup(d, b"..")?
                .ok_or_else(|| DiskError::Corrupt(format!("directory {} has no ..", d.0)))?
                .ino;
        }
        Err(DiskError::Corrupt("a directory loop".into()))
    }

    fn check_replace(
        &mut self,
        src_dir: bool,
        dst: Option<InodeNo>,
        sp: InodeNo,
        dp: InodeNo,
    ) -> Result<()> {
        let dst_dir = match dst {
            Some(d) => Some(self.read_inode(d)?.is_dir()),
            None => None,
        };
        match dst_dir {
            Some(false) if src_dir => return Err(DiskError::Refused(Refusal::NotDir)),
            Some(true) if !src_dir => return Err(DiskError::Refused(Refusal::IsDir)),
            _ => {}
        }
        let gains = src_dir && dst_dir != Some(true) && sp != dp;
        if gains && self.read_inode(dp)?.core.links_count >= LINK_MAX {
            return Err(DiskError::Refused(Refusal::TooManyLinks));
        }
        if let Some(d) = dst.filter(|_| dst_dir == Some(true)) {
            if !self.is_empty_dir(d)? {
                return Err(DiskError::Refused(Refusal::NotEmpty));
            }
        }
        Ok(())
    }

    /// A non-directory: count up, point, unpoint, count down.
    fn move_file(
        &mut self,
        names: Names<'_>,
        src: InodeNo,
        dst: Option<InodeNo>,
        now: Timestamp,
    ) -> Result<Vec<PatchId>> {
        let Names { sp, sn, dp, dn } = names;
        let mut inode = self.read_inode(src)?;
        let ft = inode
            .file_type()
            .ok_or_else(|| DiskError::Corrupt(format!("inode {} has no type", src.0)))?;
        inode.core.links_count += 1;
        let up = self.inodes.write(&mut self.m, src, &inode, &[])?;
        let set = match dst {
            Some(old) => {
                // The replaced inode loses this name: after its others.
                let mut deps = up.clone();
                let links = self.read_inode(old)?.core.links_count;
                deps.extend(
                    self.adds
                        .names_elsewhere(self.m.cache(), old, links, dp, dn),
                );
                self.retarget_entry(dp, dn, src, ft, &deps, now)?
            }
            None => self.add_entry(dp, dn, src, ft, &up, now)?,
        };
        let (_, removed, before) = self.remove_entry(sp, sn, &set, now)?;
        if dst.is_none() {
            self.adds.renamed_from(dp, dn, &removed, before);
        }
        let mut inode = self.read_inode(src)?;
        inode.core.links_count -= 1;
        inode.set_time(TimeField::Change, now);
        // The count coming down is not part of what the rename stands for
        // (see the module's soft-updates order).
        self.inodes.write(&mut self.m, src, &inode, &removed)?;
        let mut out: Vec<PatchId> = up.into_iter().chain(set.clone()).chain(removed).collect();
        if let Some(old) = dst {
            out.extend(self.drop_name(old, &set, now)?);
        }
        Ok(out)
    }

    /// A directory: unpoint, point, then fix `..` and the parents' counts.
    fn move_dir(
        &mut self,
        names: Names<'_>,
        src: InodeNo,
        dst: Option<InodeNo>,
        now: Timestamp,
    ) -> Result<Vec<PatchId>> {
        let Names { sp, sn, dp, dn } = names;
        let (_, removed, before) = self.remove_entry(sp, sn, &[], now)?;
        let mut out = removed.clone();
        let mut up = Vec::new();
        if sp != dp {
            let mut p = self.read_inode(dp)?;
            p.core.links_count += 1;
            up = self.inodes.write(&mut self.m, dp, &p, &[])?;
            out.extend(&up);
        }
        let after: Vec<PatchId> = removed.iter().chain(&up).copied().collect();
        // `..` changes while no entry names the directory (after the old
        // entry went, before the new one comes): a crash in between leaves
        // it unconnected (a leak), never named with the wrong `..`.
        let dotdot = if sp != dp {
            self.set_dotdot(src, dp, &after)?
        } else {
            Vec::new()
        };
        let before_entry: Vec<PatchId> = after.iter().chain(&dotdot).copied().collect();
        let set = match dst {
            Some(_) => self.retarget_entry(dp, dn, src, FileType::Directory, &before_entry, now)?,
            None => match self.add_entry(dp, dn, src, FileType::Directory, &before_entry, now) {
                Ok(ps) => ps,
                Err(e) => {
                    // No room for the new name: put the old one back.
                    if sp != dp {
                        self.set_dotdot(src, sp, &[])?;
                    }
                    self.add_entry(sp, sn, src, FileType::Directory, &[], now)?;
                    return Err(e);
                }
            },
        };
        out.extend(&set);
        if dst.is_none() {
            self.adds.renamed_from(dp, dn, &removed, before);
        }
        if sp != dp {
            let mut p = self.read_inode(sp)?;
            p.core.links_count -= 1;
            out.extend(self.inodes.write(&mut self.m, sp, &p, &dotdot)?);
            out.extend(dotdot);
        }
        if let Some(old) = dst {
            let gone = self.delete_inode(old, true, &set, now)?;
            // The replaced directory's `..` named `dp`: one link fewer.
            let mut p = self.read_inode(dp)?;
            p.core.links_count -= 1;
            out.extend(self.inodes.write(&mut self.m, dp, &p, &gone)?);
            out.extend(gone);
        }
        Ok(out)
    }

    /// Points directory `dir`'s `..` at `parent`, after `deps`.
    pub(crate) fn set_dotdot(
        &mut self,
        dir: InodeNo,
        parent: InodeNo,
        deps: &[PatchId],
    ) -> Result<Vec<PatchId>> {
        let inode = self.read_inode(dir)?;
        let blk = self
            .bmap(&inode, 0)?
            .ok_or_else(|| DiskError::Corrupt(format!("directory {} has no block", dir.0)))?;
        let mut bytes = self.m.read(blk)?.to_vec();
        if !set_inode(&mut bytes, b"..", parent, FileType::Directory)? {
            return Err(DiskError::Corrupt(format!("directory {} has no ..", dir.0)));
        }
        Ok(crate::diff::write(
            &mut self.m,
            blk,
            0,
            &bytes,
            deps,
            crate::fs::META,
        )?)
    }

    /// `RENAME_EXCHANGE`: the two names swap inodes.
    fn exchange(
        &mut self,
        names: Names<'_>,
        a: InodeNo,
        b: InodeNo,
        now: Timestamp,
    ) -> Result<PatchId> {
        let Names { sp, sn, dp, dn } = names;
        let (a_dir, b_dir) = (self.read_inode(a)?.is_dir(), self.read_inode(b)?.is_dir());
        if (a_dir && self.is_ancestor_or_self(a, dp)?)
            || (b_dir && self.is_ancestor_or_self(b, sp)?)
        {
            return Err(DiskError::Refused(Refusal::Invalid(
                "exchange of a directory with its own subtree",
            )));
        }
        if a == b {
            return Ok(self.m.group(&[])?);
        }
        if sp != dp && a_dir != b_dir {
            let gainer = if a_dir { dp } else { sp };
            if self.read_inode(gainer)?.core.links_count >= LINK_MAX {
                return Err(DiskError::Refused(Refusal::TooManyLinks));
            }
        }
        let ft = |fs: &mut DiskFs, i: InodeNo| {
            fs.read_inode(i)
                .map(|n| n.file_type().unwrap_or(FileType::Regular))
        };
        let (fa, fb) = (ft(self, a)?, ft(self, b)?);
        let mut out = self.retarget_entry(dp, dn, a, fa, &[], now)?;
        out.extend(self.retarget_entry(sp, sn, b, fb, &[], now)?);
        if sp != dp {
            for (moved, is_dir, to, from) in [(a, a_dir, dp, sp), (b, b_dir, sp, dp)] {
                if is_dir {
                    out.extend(self.set_dotdot(moved, to, &[])?);
                }
                let _ = from;
            }
            if a_dir != b_dir {
                // One directory changed parents: the gainer's count goes up.
                let (gainer, loser) = if a_dir { (dp, sp) } else { (sp, dp) };
                for (p, delta) in [(gainer, 1i32), (loser, -1)] {
                    let mut i = self.read_inode(p)?;
                    i.core.links_count = (i32::from(i.core.links_count) + delta) as u16;
                    out.extend(self.inodes.write(&mut self.m, p, &i, &[])?);
                }
            }
        }
        for i in [a, b] {
            let mut n = self.read_inode(i)?;
            n.set_time(TimeField::Change, now);
            out.extend(self.inodes.write(&mut self.m, i, &n, &[])?);
        }
        Ok(self.m.group(&out)?)
    }
}
