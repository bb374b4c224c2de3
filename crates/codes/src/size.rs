//! Byte sizes as people type them (`4096`, `64KiB`, `1M`, `4 MiB`): the one parser every flag
//! of `inec` that takes a size uses.

/// Why a size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("{input:?} is not a size (a number of bytes, optionally with KiB, MiB or GiB, e.g. 4096, 64KiB, 1MiB)")]
    NotASize { input: String },
    #[error("unknown unit {unit:?} in {input:?} (use B, KiB, MiB or GiB; K, M, G and KB, MB, GB mean the same)")]
    UnknownUnit { unit: String, input: String },
    #[error("size {input:?} does not fit in 64 bits")]
    TooLarge { input: String },
    /// A size of no byte, or more than this machine addresses, where a buffer of it is made.
    #[error("size {input} out of range (at least 1 byte)")]
    OutOfRange { input: String },
}

/// Parses a number of bytes with an optional binary unit: B; K, KB, KiB (2^10); M, MB, MiB
/// (2^20); G, GB, GiB (2^30); case-insensitive, spaces around the unit allowed.
pub fn parse_bytes(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(digits_end);
    if digits.is_empty() {
        return Err(SizeError::NotASize {
            input: s.to_string(),
        });
    }
    let value: u64 = digits.parse().map_err(|_| SizeError::TooLarge {
        input: s.to_string(),
    })?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => {
            return Err(SizeError::UnknownUnit {
                unit: unit.trim().to_string(),
                input: s.to_string(),
            })
        }
    };
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| SizeError::TooLarge {
            input: s.to_string(),
        })
}

/// A size flag as every command of `inec` takes it: [`parse_bytes`], at least one byte and
/// addressable (`usize`).
pub fn parse_size(s: &str) -> Result<usize, SizeError> {
    usize::try_from(parse_bytes(s)?)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| SizeError::OutOfRange {
            input: s.to_string(),
        })
}

/// A size the way [`parse_bytes`] reads it back: the largest binary unit that divides it
/// (`4KiB`, `1MiB`, `1000B`).
pub fn format_bytes(bytes: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_and_without_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("4K"), Ok(4096));
        assert_eq!(parse_bytes("4kib"), Ok(4096));
        assert_eq!(parse_bytes(" 4 MiB "), Ok(4 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("7B"), Ok(7));
        assert_eq!(parse_bytes("0"), Ok(0));
        assert!(matches!(
            parse_bytes("MiB"),
            Err(SizeError::NotASize { .. })
        ));
        assert!(matches!(parse_bytes(""), Err(SizeError::NotASize { .. })));
        assert!(matches!(parse_bytes("-1"), Err(SizeError::NotASize { .. })));
        assert!(matches!(
            parse_bytes("3XB"),
            Err(SizeError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_bytes("1.5M"),
            Err(SizeError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_bytes("99999999999999999999"),
            Err(SizeError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_bytes("17179869184G"),
            Err(SizeError::TooLarge { .. })
        ));
    }

    #[test]
    fn size_flags_are_at_least_one_byte() {
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1"), Ok(1));
        assert!(matches!(parse_size("0"), Err(SizeError::OutOfRange { .. })));
        assert_eq!(
            parse_size("0K").unwrap_err().to_string(),
            "size 0K out of range (at least 1 byte)"
        );
        assert!(matches!(parse_size("x"), Err(SizeError::NotASize { .. })));
    }

    #[test]
    fn formatted_sizes_parse_back() {
        for b in [
            0u64,
            1,
            1000,
            1024,
            4096,
            65536,
            1 << 20,
            3 << 20,
            1 << 30,
            5 << 30,
            1025,
        ] {
            assert_eq!(parse_bytes(&format_bytes(b)), Ok(b), "{}", format_bytes(b));
        }
        assert_eq!(format_bytes(4096), "4KiB");
        assert_eq!(format_bytes(1 << 20), "1MiB");
        assert_eq!(format_bytes(1000), "1000B");
    }
}
