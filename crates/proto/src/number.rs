//! Numbers as memcached reads them (its `safe_strto*` helpers over C's `strto*`): an optional
//! sign, decimal digits, nothing after them.

fn digits(token: &[u8]) -> Option<(bool, u64)> {
    let (negative, digits) = match token.first() {
        Some(b'-') => (true, &token[1..]),
        Some(b'+') => (false, &token[1..]),
        _ => (false, token),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some((negative, v))
}

/// `safe_strtoull`: `strtoull` (a minus sign negates modulo 2^64) refused when a minus sign
/// gave a value that is negative as a signed number.
pub(crate) fn strtoull(token: &[u8]) -> Option<u64> {
    let (negative, v) = digits(token)?;
    if !negative {
        return Some(v);
    }
    let v = v.wrapping_neg();
    ((v as i64) >= 0).then_some(v)
}

/// `safe_strtoul` on a 64-bit system: the same rules as [`strtoull`].
pub(crate) fn strtoul(token: &[u8]) -> Option<u64> {
    strtoull(token)
}

/// `safe_strtol` on a 64-bit system: a signed 64-bit number.
pub(crate) fn strtol(token: &[u8]) -> Option<i64> {
    let (negative, v) = digits(token)?;
    if negative {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_number_rules() {
        assert_eq!(strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(strtoull(b"18446744073709551616"), None);
        assert_eq!(strtoull(b"-1"), None);
        assert_eq!(strtoull(b"-0"), Some(0));
        assert_eq!(strtoull(b"+7"), Some(7));
        assert_eq!(strtoull(b"0007"), Some(7));
        assert_eq!(strtoull(b"7a"), None);
        assert_eq!(strtoull(b""), None);
        assert_eq!(strtoull(b"-"), None);
        assert_eq!(strtol(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(strtol(b"-9223372036854775809"), None);
        assert_eq!(strtol(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(strtol(b"9223372036854775808"), None);
        assert_eq!(strtol(b"-1"), Some(-1));
    }
}
