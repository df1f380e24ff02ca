//! Pass 4: link counts. Each inode in use (the root and files; not the
//! reserved inodes) must have as many links as entries name it.
//!
//! A count above the entries is a soft-updates leak (the count is raised
//! before an entry is written and lowered after it is removed); no entry at
//! all is the same leak with a correct count of 0 (e2fsck: "unattached
//! inode"). A count below the entries is corruption: removing one entry
//! would free an inode another still names.

use crate::finding::FindingKind;
use crate::fs::Fs;
use crate::state::{State, USED};
use stitch_format::inode::ROOT_INO;

pub fn run(fs: &Fs, st: &mut State) {
    for ino in 1..=fs.inodes_count() {
        if ino != ROOT_INO.0 && ino < fs.first_ino {
            continue;
        }
        let Some(&info) = st.inode(ino) else {
            break;
        };
        if info.flags & USED == 0 {
            continue;
        }
        let (stored, counted) = (info.links, info.counted);
        if counted == 0 || u32::from(stored) > counted {
            st.report(FindingKind::LinkCountTooHigh {
                ino,
                stored,
                counted,
            });
        } else if u32::from(stored) < counted {
            st.report(FindingKind::LinkCountTooLow {
                ino,
                stored,
                counted,
            });
        }
    }
}
