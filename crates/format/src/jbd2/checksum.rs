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

/// Raw big-endian CRC32 update, as the kernel's `crc32_be(seed, data, len)`:
/// CRC-32/MPEG-2 (MSB first, no reflection, no final xor) started from
/// `seed`. The commit checksum covers every journaled block of a
/// transaction, once per fsync, so this uses the carry-less-multiply
/// folding of `crc-fast` (tens of GB/s) rather than a table.
pub fn crc32_be(seed: u32, data: &[u8]) -> u32 {
    let mut d =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Mpeg2, u64::from(seed));
    d.update(data);
    d.finalize() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, a byte at a time: the reference `crc32_be` is
    /// checked against.
    fn crc32_be_bytewise(seed: u32, data: &[u8]) -> u32 {
        data.iter().fold(seed, |mut crc, &b| {
            crc ^= u32::from(b) << 24;
            for _ in 0..8 {
                crc = if crc & 0x8000_0000 != 0 {
                    (crc << 1) ^ 0x04C1_1DB7
                } else {
                    crc << 1
                };
            }
            crc
        })
    }

    #[test]
    fn known_vectors() {
        // Standard CRC-32C check value of "123456789" is 0xE3069283
        // (inverted in and out).
        assert_eq!(!crc32c_raw(!0, b"123456789"), 0xE306_9283);
        // CRC-32/MPEG-2 (MSB-first, init !0, no final xor) of "123456789".
        assert_eq!(crc32_be(!0, b"123456789"), 0x0376_E6E7);
        // The fast path equals the definition, at every length and seed
        // (the SIMD path has its own handling of short and ragged tails).
        let data: Vec<u8> = (0..4099u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 255, 256, 4096, 4099] {
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
