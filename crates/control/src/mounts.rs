//! The mount table (`/proc/self/mounts`, `mountinfo`) as stitchfs's tools
//! read it.

use std::path::PathBuf;

/// The stitchfs mounts in `/proc/self/mountinfo` text, in its order:
/// each one's mount point and source (the image, unless `-o fsname`
/// changed it), unescaped.
pub fn stitchfs_mounts(mountinfo: &str) -> Vec<(PathBuf, PathBuf)> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut rest = right.split(' ');
            let (fstype, source) = (rest.next()?, rest.next()?);
            (fstype == "fuse.stitchfs").then(|| {
                let path = |f: &str| PathBuf::from(unescape_mount_field(f));
                (path(point), path(source))
            })
        })
        .collect()
}

/// A field of the mount table, which writes space, tab, newline and
/// backslash as `\ooo` octal.
pub fn unescape_mount_field(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stitchfs_mounts_are_found_by_type() {
        let info = "\
36 25 0:32 / /mnt/a rw,relatime shared:1 - ext4 /dev/vda rw
37 25 0:45 / /mnt/with\\040space rw,nosuid - fuse.stitchfs /img/my\\040disk.img rw,user_id=0
38 25 0:46 / /mnt/other rw - fuse.fuse2fs /img/x.img rw
39 25 0:47 / /srv/mail rw - fuse.stitchfs stitchfs-recording rw
";
        let p = PathBuf::from;
        assert_eq!(
            stitchfs_mounts(info),
            vec![
                (p("/mnt/with space"), p("/img/my disk.img")),
                (p("/srv/mail"), p("stitchfs-recording"))
            ]
        );
    }

    #[test]
    fn octal_escapes_are_undone_and_others_kept() {
        assert_eq!(unescape_mount_field(r"/a\040b\011c"), "/a b\tc");
        assert_eq!(unescape_mount_field(r"/plain\x"), r"/plain\x");
        assert_eq!(unescape_mount_field(r"/back\134slash"), r"/back\slash");
    }
}
