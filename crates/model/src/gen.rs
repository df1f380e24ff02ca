//! Seeded random op sequences, valid and invalid mixed, over a small fixed
//! name set so that collisions, renames over existing names, deep
//! directories and hard links happen often.
//!
//! Invariants: the same seed and config give the same ops on every
//! machine (ChaCha8); symlink targets start with `~`, which no generated
//! name does, so every symlink dangles as [`crate::op`] requires.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::types::{Name, Path, Rdev, Special, Time, NAME_MAX};
use crate::{Fd, Op, RenameFlags};

/// What the generator may produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenConfig {
    /// Names paths are built from (never starting with `~`).
    pub names: Vec<Name>,
    /// Deepest path, in components.
    pub max_depth: usize,
    /// Largest write offset or truncate size (sparse files up to this).
    pub max_offset: u64,
    /// Largest single write.
    pub max_write: usize,
    /// Whether to generate `chown` (only root may give files away).
    pub chown: bool,
    /// Permission bits set in every generated mode: `0o700` keeps a
    /// non-root runner able to enter and write what it made.
    pub min_perm: u32,
}

impl Default for GenConfig {
    fn default() -> GenConfig {
        GenConfig {
            names: ["a", "b", "c", "d"].into_iter().map(Name::from).collect(),
            max_depth: 3,
            max_offset: 2 << 20,
            max_write: 64 << 10,
            chown: true,
            min_perm: 0,
        }
    }
}

/// `n` ops from `seed`.
pub fn ops(seed: u64, n: usize, cfg: &GenConfig) -> Vec<Op> {
    let mut g = Gen {
        rng: ChaCha8Rng::seed_from_u64(seed),
        cfg,
    };
    (0..n).map(|_| g.op()).collect()
}

struct Gen<'a> {
    rng: ChaCha8Rng,
    cfg: &'a GenConfig,
}

/// Relative weights of the op kinds, in the order of [`Gen::op`].
const WEIGHTS: [u32; 19] = [10, 12, 3, 4, 6, 5, 5, 14, 8, 4, 3, 2, 1, 3, 2, 3, 6, 4, 3];

impl Gen<'_> {
    fn op(&mut self) -> Op {
        let total: u32 = WEIGHTS.iter().sum();
        let mut pick = self.rng.gen_range(0..total);
        let mut kind = 0;
        while pick >= WEIGHTS[kind] {
            pick -= WEIGHTS[kind];
            kind += 1;
        }
        if kind == 11 && !self.cfg.chown {
            return Op::Stat { path: self.path() };
        }
        self.op_of_kind(kind)
    }

    fn op_of_kind(&mut self, kind: usize) -> Op {
        let path = self.path();
        match kind {
            0 => Op::Create {
                path,
                perm: self.perm(),
            },
            1 => Op::Mkdir {
                path,
                perm: self.perm(),
            },
            2 => Op::Mknod {
                path,
                kind: self.special(),
                perm: self.perm(),
            },
            3 => Op::Symlink {
                path,
                target: self.target(),
            },
            4 => Op::Link {
                to: self.near(&path),
                from: path,
            },
            5 => Op::Unlink { path },
            6 => Op::Rmdir { path },
            7 => Op::Rename {
                to: self.near(&path),
                from: path,
                flags: self.flags(),
            },
            8 => Op::Write {
                path,
                offset: self.offset(),
                data: self.data(),
            },
            9 => Op::Truncate {
                path,
                size: self.offset(),
            },
            10 => Op::Chmod {
                path,
                perm: self.perm(),
            },
            11 => Op::Chown {
                path,
                uid: self.id(),
                gid: self.id(),
            },
            12 => Op::SetTimes {
                path,
                atime: self.time(),
                mtime: self.time(),
            },
            13 => Op::Read {
                path,
                offset: self.rng.gen_range(0..8192),
                len: self.rng.gen_range(0..16384),
            },
            14 => Op::Readdir {
                path: self.dir_path(),
            },
            15 => Op::Stat { path },
            16 => Op::Open { path },
            17 => Op::WriteFd {
                fd: self.fd(),
                offset: self.offset(),
                data: self.data(),
            },
            _ => Op::Close { fd: self.fd() },
        }
    }

    /// A path of 1..=max_depth names, shallow ones likelier (so parents
    /// exist more often); one name in 50 is too long.
    fn path(&mut self) -> Path {
        let mut depth = 1;
        while depth < self.cfg.max_depth && self.rng.gen_bool(0.55) {
            depth += 1;
        }
        Path((0..depth).map(|_| self.name()).collect())
    }

    /// A second path for link or rename: half the time a sibling of `path`
    /// (whose parent then surely exists if `path`'s does).
    fn near(&mut self, path: &Path) -> Path {
        if self.rng.gen_bool(0.5) {
            let mut p = path.clone();
            *p.0.last_mut().expect("generated paths are not empty") = self.name();
            return p;
        }
        self.path()
    }

    /// Like [`Gen::path`], but may be the root.
    fn dir_path(&mut self) -> Path {
        let mut p = self.path();
        p.0.truncate(self.rng.gen_range(0..=p.0.len()));
        p
    }

    fn name(&mut self) -> Name {
        if self.rng.gen_ratio(1, 50) {
            return Name(vec![b'x'; NAME_MAX + 1]);
        }
        let i = self.rng.gen_range(0..self.cfg.names.len());
        self.cfg.names[i].clone()
    }

    /// A time ext2 with 256-byte inodes holds (1901-12-13 to 2446, to the
    /// nanosecond), in one of four stretches (before 1970, before 2038,
    /// before 2106, before 2310). Not the range's ends, where file systems
    /// clamp, nor 2310-04-04 to 2378-04-22, which e2fsck takes for
    /// pre-1970 times that kernels before 4.4 encoded wrongly.
    fn time(&mut self) -> Time {
        let (lo, hi): (i64, i64) = match self.rng.gen_range(0..4) {
            0 => (-(1 << 31) + 1, 0),
            1 => (0, 1 << 31),
            2 => (1 << 31, 1 << 32),
            _ => (1 << 32, 3 * (1 << 32) - (1 << 31)),
        };
        Time {
            secs: self.rng.gen_range(lo..hi),
            nsec: self.rng.gen_range(0..1_000_000_000),
        }
    }

    fn perm(&mut self) -> u32 {
        // No setuid or setgid: a setgid directory makes children inherit its
        // group, which the model does not model.
        self.rng.gen_range(0..0o2000) | self.cfg.min_perm
    }

    fn special(&mut self) -> Special {
        let rdev = Rdev {
            major: self.rng.gen_range(1..256),
            minor: self.rng.gen_range(0..256),
        };
        match self.rng.gen_range(0..4) {
            0 => Special::Fifo,
            1 => Special::Socket,
            2 => Special::Char(rdev),
            _ => Special::Block(rdev),
        }
    }

    /// A dangling target: `~name`, `~name/name`, or now and then empty.
    fn target(&mut self) -> Vec<u8> {
        if self.rng.gen_ratio(1, 20) {
            return Vec::new();
        }
        let mut t = b"~".to_vec();
        t.extend_from_slice(self.name().as_bytes());
        if self.rng.gen_bool(0.3) {
            t.push(b'/');
            t.extend_from_slice(self.name().as_bytes());
        }
        t
    }

    fn flags(&mut self) -> RenameFlags {
        match self.rng.gen_range(0..50) {
            0..=39 => RenameFlags::default(),
            40..=44 => RenameFlags {
                noreplace: true,
                exchange: false,
            },
            45..=48 => RenameFlags {
                noreplace: false,
                exchange: true,
            },
            _ => RenameFlags {
                noreplace: true,
                exchange: true,
            },
        }
    }

    /// Mostly small offsets (overwrites, short holes), sometimes far out.
    fn offset(&mut self) -> u64 {
        if self.rng.gen_ratio(1, 10) {
            return self.rng.gen_range(0..=self.cfg.max_offset);
        }
        self.rng.gen_range(0..8192)
    }

    /// Mostly short writes, sometimes up to `max_write`; bytes vary so a
    /// misplaced write shows.
    fn data(&mut self) -> Vec<u8> {
        let len = if self.rng.gen_ratio(1, 8) {
            self.rng.gen_range(0..=self.cfg.max_write)
        } else {
            self.rng.gen_range(0..100)
        };
        let seed: u8 = self.rng.gen();
        (0..len)
            .map(|i| seed.wrapping_add((i % 251) as u8))
            .collect()
    }

    fn id(&mut self) -> u32 {
        [0, 1000, 65534][self.rng.gen_range(0..3)]
    }

    fn fd(&mut self) -> Fd {
        Fd(self.rng.gen_range(0..2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, Model, Owner};

    #[test]
    fn same_seed_same_ops() {
        let cfg = GenConfig::default();
        assert_eq!(ops(7, 200, &cfg), ops(7, 200, &cfg));
        assert_ne!(ops(7, 200, &cfg), ops(8, 200, &cfg));
    }

    /// The generator must reach the interesting states, or the kernel
    /// comparison proves little: successful renames over existing names,
    /// hard links, unlinked open files and depth-3 entries.
    #[test]
    fn sequences_reach_interesting_states() {
        let (mut replaced, mut linked, mut orphans, mut deep) = (0, 0, 0, 0);
        for seed in 0..32 {
            let mut m = Model::new(0o755, Owner { uid: 0, gid: 0 }, Limits::default());
            for op in ops(seed, 300, &GenConfig::default()) {
                let over = matches!(&op, Op::Rename { to, .. } if m.resolve(to).is_ok());
                let ok = m.apply(&op).is_ok();
                replaced += usize::from(over && ok);
                orphans += usize::from(!m.orphans().is_empty());
            }
            let tree = m.snapshot();
            linked += tree.nodes.values().filter(|n| n.same_as.is_some()).count();
            deep += tree
                .nodes
                .keys()
                .filter(|k| k.iter().filter(|b| **b == b'/').count() == 2)
                .count();
        }
        assert!(
            replaced > 20 && linked > 5 && orphans > 20 && deep > 10,
            "replaced {replaced} linked {linked} orphan steps {orphans} deep {deep}"
        );
    }
}
