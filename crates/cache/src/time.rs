//! memcached's exptime rules and the clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// An exptime up to this many seconds is relative to now; above it is a Unix time (memcached's
/// `REALTIME_MAXDELTA`, 30 days).
pub const RELATIVE_MAX_SECS: i64 = 60 * 60 * 24 * 30;

/// The absolute time (Unix seconds) of an exptime as a client sends it: 0 = never (returned as
/// 0); negative = already expired; ≤ 30 days = `now + exptime`; otherwise a Unix time, which is
/// expired if it is not in the future. An expired exptime is returned as 1 (long past).
pub fn absolute_exptime(exptime: i64, now_secs: i64) -> i64 {
    if exptime == 0 {
        0
    } else if exptime < 0 {
        1
    } else if exptime <= RELATIVE_MAX_SECS {
        now_secs + exptime
    } else if exptime <= now_secs {
        1
    } else {
        exptime
    }
}

/// Whether an item with absolute exptime `abs` is expired at `now_secs` (as memcached:
/// `exptime != 0 && exptime <= now`).
pub fn is_expired(abs: i64, now_secs: i64) -> bool {
    abs != 0 && abs <= now_secs
}

/// The remaining TTL for `mg t`: -1 for an item that never expires.
pub fn ttl(abs: i64, now_secs: i64) -> i64 {
    if abs == 0 {
        -1
    } else {
        (abs - now_secs).max(0)
    }
}

/// Microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> i64 {
    secs_of(now_micros())
}

/// The whole seconds of `micros` µs since the Unix epoch (as [`now_secs`] from one clock read).
pub fn secs_of(micros: u64) -> i64 {
    (micros / 1_000_000) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_exptime_rules() {
        let now = 1_700_000_000;
        assert_eq!(absolute_exptime(0, now), 0);
        assert_eq!(absolute_exptime(-1, now), 1);
        assert_eq!(absolute_exptime(10, now), now + 10);
        assert_eq!(
            absolute_exptime(RELATIVE_MAX_SECS, now),
            now + RELATIVE_MAX_SECS
        );
        // Just over 30 days is an absolute time, long past.
        assert_eq!(absolute_exptime(RELATIVE_MAX_SECS + 1, now), 1);
        assert_eq!(absolute_exptime(now + 100, now), now + 100);
        assert_eq!(absolute_exptime(now, now), 1);
        assert!(is_expired(1, now));
        assert!(!is_expired(0, now));
        assert!(is_expired(now, now));
        assert!(!is_expired(now + 1, now));
        assert_eq!(ttl(0, now), -1);
        assert_eq!(ttl(now + 7, now), 7);
    }
}
