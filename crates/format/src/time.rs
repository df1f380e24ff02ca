//! Timestamps, and the range of them an ext2/ext3 file system holds.
//!
//! Linux reads and writes ext2 and ext3 images with its ext4 driver, and
//! stitchfs keeps times exactly as that driver does. An inode's base field
//! (`i_atime`, `i_mtime`, `i_ctime`) holds the low 32 bits of the seconds,
//! read as signed: 1901-12-13 to 2038-01-19, whole seconds. Where the
//! inode's `i_extra_isize` covers the field's `_extra` word, that word adds
//! two epoch bits (units of 2^32 seconds on top of the signed base) and the
//! nanoseconds (`ext4_encode_extra_time`, `ext4_decode_extra_time`):
//! 1901-12-13 to 2446-05-10, to the nanosecond. The encoding itself lives
//! with the inode ([`crate::inode::Inode::time`]).
//!
//! A file system's range ([`TimeRange`]) follows from its inode size, as
//! the kernel's `s_time_min`, `s_time_max` and `s_time_gran` do: a time
//! outside it is clamped to its nearest end, with no nanoseconds there
//! (`timestamp_truncate`); what the kernel would store is what stitchfs
//! stores, rather than an error.
//!
//! Invariant: a [`Timestamp`]'s nanoseconds are below 10^9.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const NSEC_PER_SEC: u32 = 1_000_000_000;

/// A point in time: seconds since 1970-01-01 UTC (negative before it) and
/// nanoseconds within that second, as in a `timespec`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    secs: i64,
    nsec: u32,
}

impl Timestamp {
    /// 1970-01-01 00:00:00 UTC.
    pub const EPOCH: Timestamp = Timestamp { secs: 0, nsec: 0 };

    /// `secs` and `nsec` nanoseconds after it; `nsec` of 10^9 or more is a
    /// caller bug.
    pub const fn new(secs: i64, nsec: u32) -> Timestamp {
        assert!(nsec < NSEC_PER_SEC, "nanoseconds out of range");
        Timestamp { secs, nsec }
    }

    pub const fn from_secs(secs: i64) -> Timestamp {
        Timestamp { secs, nsec: 0 }
    }

    pub const fn secs(self) -> i64 {
        self.secs
    }

    pub const fn nsec(self) -> u32 {
        self.nsec
    }

    /// The wall clock.
    pub fn now() -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }

    /// A `SystemTime`, saturating at the ends of `i64` seconds.
    pub fn from_system_time(t: SystemTime) -> Timestamp {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => match i64::try_from(d.as_secs()) {
                Ok(secs) => Timestamp::new(secs, d.subsec_nanos()),
                Err(_) => Timestamp::new(i64::MAX, NSEC_PER_SEC - 1),
            },
            Err(e) => {
                let d = e.duration();
                // -(s + n/10^9) is -(s + 1) + (10^9 - n)/10^9.
                let (s, n) = (d.as_secs(), d.subsec_nanos());
                match (i64::try_from(s), n) {
                    (Ok(s), 0) => Timestamp::new(-s, 0),
                    (Ok(s), n) if s < i64::MAX => Timestamp::new(-s - 1, NSEC_PER_SEC - n),
                    _ => Timestamp::new(i64::MIN, 0),
                }
            }
        }
    }

    pub fn to_system_time(self) -> SystemTime {
        let whole = Duration::from_secs(self.secs.unsigned_abs());
        let t = if self.secs >= 0 {
            UNIX_EPOCH + whole
        } else {
            UNIX_EPOCH - whole
        };
        t + Duration::from_nanos(u64::from(self.nsec))
    }
}

/// The times a file system holds: from 1901-12-13 20:45:52 UTC (-2^31
/// seconds) to the last second its inodes can count, to the nanosecond
/// or the second. The kernel's `s_time_min`, `s_time_max` and
/// `s_time_gran` for an ext2/ext3 image (`ext4_fill_super`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TimeRange {
    /// 128-byte inodes: signed 32-bit seconds only.
    Seconds,
    /// Inodes large enough for the `_extra` words of all three times
    /// (through `i_atime_extra`, 144 bytes): two epoch bits and the
    /// nanoseconds, to 2446-05-10.
    Nanoseconds,
}

impl TimeRange {
    /// The range of a file system whose inodes are `inode_size` bytes.
    pub fn of_inode_size(inode_size: u16) -> TimeRange {
        if usize::from(inode_size) >= crate::inode::ATIME_EXTRA_END {
            TimeRange::Nanoseconds
        } else {
            TimeRange::Seconds
        }
    }

    /// The earliest time held (`EXT4_TIMESTAMP_MIN`).
    pub const fn min(self) -> i64 {
        i32::MIN as i64
    }

    /// The latest second held (`EXT4_EXTRA_TIMESTAMP_MAX`, or
    /// `EXT4_NON_EXTRA_TIMESTAMP_MAX`).
    pub const fn max(self) -> i64 {
        match self {
            TimeRange::Seconds => i32::MAX as i64,
            TimeRange::Nanoseconds => (1 << 34) - 1 + i32::MIN as i64,
        }
    }

    /// The step between times held, in nanoseconds.
    pub const fn granularity(self) -> u32 {
        match self {
            TimeRange::Seconds => NSEC_PER_SEC,
            TimeRange::Nanoseconds => 1,
        }
    }

    /// `t` as this range holds it (the kernel's `timestamp_truncate`):
    /// clamped to the range, with no nanoseconds at either end of it, and
    /// whole seconds where the range has no finer step.
    pub fn truncate(self, t: Timestamp) -> Timestamp {
        let secs = t.secs.clamp(self.min(), self.max());
        let nsec = if secs != t.secs || secs == self.min() || secs == self.max() {
            0
        } else {
            t.nsec - t.nsec % self.granularity()
        };
        Timestamp { secs, nsec }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_time_round_trips_on_both_sides_of_the_epoch() {
        for (secs, nsec) in [
            (0, 0),
            (1, 5),
            (-1, 0),
            (-1, 999_999_999),
            (-2, 500_000_000),
            (1 << 33, 7),
        ] {
            let t = Timestamp::new(secs, nsec);
            assert_eq!(Timestamp::from_system_time(t.to_system_time()), t);
        }
        let half_before = UNIX_EPOCH - Duration::from_millis(500);
        assert_eq!(
            Timestamp::from_system_time(half_before),
            Timestamp::new(-1, 500_000_000)
        );
    }

    /// `timestamp_truncate`'s cases, for both ranges.
    #[test]
    fn truncate_clamps_and_keeps_what_the_range_holds() {
        let ns = TimeRange::Nanoseconds;
        let s = TimeRange::Seconds;
        let t = |secs, nsec| Timestamp::new(secs, nsec);
        let check = [
            (ns, t(5, 7), t(5, 7)),
            (ns, t(-5, 7), t(-5, 7)),
            (ns, t(1 << 31, 1), t(1 << 31, 1)),
            (ns, t(15_032_385_535, 9), t(15_032_385_535, 0)),
            (ns, t(1 << 40, 9), t(15_032_385_535, 0)),
            (ns, t(-(1 << 31), 9), t(-(1 << 31), 0)),
            (ns, t(-(1 << 40), 9), t(-(1 << 31), 0)),
            (s, t(5, 7), t(5, 0)),
            (s, t(1 << 31, 0), t((1 << 31) - 1, 0)),
            (s, t(-(1 << 31) - 1, 0), t(-(1 << 31), 0)),
        ];
        for (range, given, held) in check {
            assert_eq!(range.truncate(given), held, "{range:?} {given:?}");
        }
        assert_eq!(ns.max(), 15_032_385_535, "2446-05-10 22:38:55 UTC");
    }

    #[test]
    fn the_range_follows_the_inode_size() {
        assert_eq!(TimeRange::of_inode_size(128), TimeRange::Seconds);
        assert_eq!(TimeRange::of_inode_size(256), TimeRange::Nanoseconds);
    }
}
