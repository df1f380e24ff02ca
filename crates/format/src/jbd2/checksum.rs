//! The two CRCs JBD2 uses, in the kernel's raw form (no pre- or
//! post-inversion: the caller passes the seed, the result is stored as is).
//!
//! - CRC32C (Castagnoli), `jbd2_chksum()`: for `CSUM_V2`/`CSUM_V3`. The
//!   per-journal seed is the CRC32C of the journal UUID from seed `!0`.
//! - CRC32 with the big-endian (MSB-first) polynomial 0x04C11DB7,
//!   `crc32_be()`: for `COMPAT_CHECKSUM`, chained from `!0` over every
//!   descriptor and data block of a transaction in log order.

/// Raw CRC32C update, as the kernel's `crc32c(seed, data, len)`.
pub fn crc32c_raw(seed: u32, data: &[u8]) -> u32 {
    // The crate inverts before and after; undo both to get the raw update.
    !crc32c::crc32c_append(!seed, data)
}

/// The per-journal checksum seed (`j_csum_seed`).
pub fn csum_seed(uuid: &[u8; 16]) -> u32 {
    crc32c_raw(!0, uuid)
}

/// Checksum of a journalled copy of a data block with transaction `sequence`.
pub fn data_block_csum(seed: u32, sequence: u32, data: &[u8]) -> u32 {
    crc32c_raw(crc32c_raw(seed, &sequence.to_be_bytes()), data)
}

const fn crc32_be_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u32) << 24;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04C1_1DB7
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CRC32_BE: [u32; 256] = crc32_be_table();

/// Tables for eight bytes at a time: `[k][i]` is byte `i` followed by `k`
/// zero bytes.
static CRC32_BE8: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    t[0] = crc32_be_table();
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev << 8) ^ t[0][(prev >> 24) as usize];
            i += 1;
        }
        k += 1;
    }
    t
};

/// Raw big-endian CRC32 update, as the kernel's `crc32_be(seed, data, len)`
/// (eight bytes per step: the commit checksum covers every journaled block).
pub fn crc32_be(seed: u32, data: &[u8]) -> u32 {
    let t = &CRC32_BE8;
    let mut crc = seed;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let a = crc ^ u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        let b = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
        crc = t[7][(a >> 24) as usize]
            ^ t[6][((a >> 16) & 0xff) as usize]
            ^ t[5][((a >> 8) & 0xff) as usize]
            ^ t[4][(a & 0xff) as usize]
            ^ t[3][(b >> 24) as usize]
            ^ t[2][((b >> 16) & 0xff) as usize]
            ^ t[1][((b >> 8) & 0xff) as usize]
            ^ t[0][(b & 0xff) as usize];
    }
    crc32_be_bytewise(crc, chunks.remainder())
}

fn crc32_be_bytewise(seed: u32, data: &[u8]) -> u32 {
    data.iter().fold(seed, |crc, &b| {
        (crc << 8) ^ CRC32_BE[((crc >> 24) as u8 ^ b) as usize]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // Standard CRC-32C check value of "123456789" is 0xE3069283
        // (inverted in and out).
        assert_eq!(!crc32c_raw(!0, b"123456789"), 0xE306_9283);
        // CRC-32/MPEG-2 (MSB-first, init !0, no final xor) of "123456789".
        assert_eq!(crc32_be(!0, b"123456789"), 0x0376_E6E7);
        // Eight bytes at a time equals one at a time.
        let data: Vec<u8> = (0..4099u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for len in [0, 1, 7, 8, 9, 63, 4096, 4099] {
            for seed in [0, !0, 0x1234_5678] {
                assert_eq!(
                    crc32_be(seed, &data[..len]),
                    crc32_be_bytewise(seed, &data[..len])
                );
            }
        }
        // Chaining equals one pass.
        assert_eq!(
            crc32c_raw(crc32c_raw(5, b"ab"), b"cd"),
            crc32c_raw(5, b"abcd")
        );
    }
}
