//! [`Lsn`]: SQL Server's 10-byte log sequence number.
//!
//! Layout (as CDC exposes it in `binary(10)` columns): 4 bytes virtual-log-file sequence,
//! 4 bytes log block, 2 bytes slot, all big-endian, so that byte-wise comparison is log order.

use std::fmt;

/// A 10-byte log sequence number; `Ord` is log order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub [u8; 10]);

/// Log records per simulated log block before the block number advances.
const SLOTS_PER_BLOCK: u64 = 4_000;
/// Blocks per simulated virtual log file.
const BLOCKS_PER_VLF: u64 = 1 << 20;
/// The first VLF sequence a fresh simulated database uses (real databases rarely start at 0).
const FIRST_VLF: u64 = 0x22;

impl Lsn {
    /// `0x00000000000000000000`: what `fn_cdc_get_min_lsn` returns for an unknown instance.
    pub const ZERO: Lsn = Lsn([0; 10]);

    /// The LSN of the `n`-th log record of a simulated database (n ≥ 0), strictly increasing
    /// in `n`.
    pub fn from_record(n: u64) -> Self {
        let slot = n % SLOTS_PER_BLOCK + 1;
        let block = (n / SLOTS_PER_BLOCK) % BLOCKS_PER_VLF + 1;
        let vlf = FIRST_VLF + n / (SLOTS_PER_BLOCK * BLOCKS_PER_VLF);
        Self::from_parts(vlf as u32, block as u32, slot as u16)
    }

    /// Builds an LSN from its three parts.
    pub fn from_parts(vlf: u32, block: u32, slot: u16) -> Self {
        let mut bytes = [0u8; 10];
        bytes[0..4].copy_from_slice(&vlf.to_be_bytes());
        bytes[4..8].copy_from_slice(&block.to_be_bytes());
        bytes[8..10].copy_from_slice(&slot.to_be_bytes());
        Self(bytes)
    }

    /// From a `binary(10)` value; `None` unless exactly 10 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        <[u8; 10]>::try_from(bytes).ok().map(Self)
    }

    /// Parses `0x`-prefixed or bare hex of up to 20 digits, padded on the left.
    pub fn parse_hex(text: &str) -> Option<Self> {
        let digits = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(text);
        if digits.is_empty() || digits.len() > 20 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let padded = format!("{digits:0>20}");
        let mut bytes = [0u8; 10];
        for (index, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&padded[index * 2..index * 2 + 2], 16).ok()?;
        }
        Some(Self(bytes))
    }

    /// The next LSN (`sys.fn_cdc_increment_lsn`): the 80-bit value plus one.
    pub fn increment(self) -> Self {
        Self::from_u128(self.to_u128().wrapping_add(1) & MASK_80)
    }

    /// The previous LSN (`sys.fn_cdc_decrement_lsn`): the 80-bit value minus one.
    pub fn decrement(self) -> Self {
        Self::from_u128(self.to_u128().wrapping_sub(1) & MASK_80)
    }

    fn to_u128(self) -> u128 {
        self.0.iter().fold(0u128, |acc, byte| (acc << 8) | u128::from(*byte))
    }

    fn from_u128(value: u128) -> Self {
        let bytes = value.to_be_bytes();
        let mut out = [0u8; 10];
        out.copy_from_slice(&bytes[6..16]);
        Self(out)
    }
}

const MASK_80: u128 = (1u128 << 80) - 1;

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("0x")?;
        for byte in self.0 {
            write!(f, "{byte:02X}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_lsns_increase_and_round_trip_as_hex() {
        let mut previous = Lsn::ZERO;
        for n in [0, 1, 3_999, 4_000, 4_001, 4_000 * (1 << 20), 4_000 * (1 << 20) + 1] {
            let lsn = Lsn::from_record(n);
            assert!(lsn > previous, "{lsn} after {previous}");
            assert_eq!(Lsn::parse_hex(&lsn.to_string()), Some(lsn));
            previous = lsn;
        }
    }

    #[test]
    fn hex_is_left_padded() {
        assert_eq!(Lsn::parse_hex("2A").unwrap().to_string(), "0x0000000000000000002A");
        assert!(Lsn::parse_hex("0x").is_none());
        assert!(Lsn::parse_hex("0x0000002A000001F000031").is_none());
    }

    #[test]
    fn increment_and_decrement_carry_across_parts() {
        let lsn = Lsn::from_parts(0x2A, 7, u16::MAX);
        assert_eq!(lsn.increment(), Lsn::from_parts(0x2A, 8, 0));
        assert_eq!(lsn.increment().decrement(), lsn);
    }
}
