//! The mount table (`/proc/self/mounts`, `mountinfo`) as stitchfs's tools
//! read it.

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
    fn octal_escapes_are_undone_and_others_kept() {
        assert_eq!(unescape_mount_field(r"/a\040b\011c"), "/a b\tc");
        assert_eq!(unescape_mount_field(r"/plain\x"), r"/plain\x");
        assert_eq!(unescape_mount_field(r"/back\134slash"), r"/back\slash");
    }
}
