//! Axis scales: value → pixel, linear or logarithmic, and their tick positions.

/// Maps a domain `[d0, d1]` onto a pixel range `[r0, r1]` (r1 < r0 for a y axis growing up).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    Linear {
        d0: f64,
        d1: f64,
        r0: f64,
        r1: f64,
    },
    /// Base-10 logarithmic; the domain must be positive.
    Log {
        d0: f64,
        d1: f64,
        r0: f64,
        r1: f64,
    },
}

impl Scale {
    /// A linear scale; an empty domain is widened so that it maps.
    pub fn linear(d0: f64, d1: f64, r0: f64, r1: f64) -> Scale {
        let d1 = if d1 > d0 { d1 } else { d0 + 1.0 };
        Scale::Linear { d0, d1, r0, r1 }
    }

    /// A log scale; non-positive bounds are raised to a small positive value.
    pub fn log(d0: f64, d1: f64, r0: f64, r1: f64) -> Scale {
        let d0 = if d0 > 0.0 { d0 } else { 1e-3 };
        let d1 = if d1 > d0 { d1 } else { d0 * 10.0 };
        Scale::Log { d0, d1, r0, r1 }
    }

    /// The pixel of value `v` (a log scale clamps v ≤ 0 to the domain's start).
    pub fn map(&self, v: f64) -> f64 {
        match *self {
            Scale::Linear { d0, d1, r0, r1 } => r0 + (v - d0) / (d1 - d0) * (r1 - r0),
            Scale::Log { d0, d1, r0, r1 } => {
                let v = if v > 0.0 { v } else { d0 };
                r0 + (v.log10() - d0.log10()) / (d1.log10() - d0.log10()) * (r1 - r0)
            }
        }
    }

    pub fn domain(&self) -> (f64, f64) {
        match *self {
            Scale::Linear { d0, d1, .. } | Scale::Log { d0, d1, .. } => (d0, d1),
        }
    }

    pub fn range(&self) -> (f64, f64) {
        match *self {
            Scale::Linear { r0, r1, .. } | Scale::Log { r0, r1, .. } => (r0, r1),
        }
    }

    /// Tick values inside the domain.
    pub fn ticks(&self) -> Vec<f64> {
        match *self {
            Scale::Linear { d0, d1, .. } => linear_ticks(d0, d1, 6),
            Scale::Log { d0, d1, .. } => log_ticks(d0, d1),
        }
    }
}

/// About `want` round ticks (steps of 1, 2 or 5 × 10^k) covering `[lo, hi]`.
pub fn linear_ticks(lo: f64, hi: f64, want: usize) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater)
        || !lo.is_finite()
        || !hi.is_finite()
    {
        return vec![lo];
    }
    let raw = (hi - lo) / want.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// Powers of ten inside `[lo, hi]` (lo > 0); when fewer than two, also 2× and 5× of them.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo) {
        return vec![lo.max(f64::MIN_POSITIVE)];
    }
    let inside = |v: f64| v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9);
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let decades: Vec<f64> = (a..=b)
        .map(|e| 10f64.powi(e))
        .filter(|&v| inside(v))
        .collect();
    if decades.len() >= 2 {
        return decades;
    }
    (a..=b)
        .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
        .filter(|&v| inside(v))
        .collect()
}

/// A short label for a tick value: 1, 2.5, 10, 1k, 20k, 1.5M.
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    let (x, suffix) = if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = if (x - x.round()).abs() < 1e-9 {
        format!("{}", x.round() as i64)
    } else if x.abs() >= 10.0 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    format!("{s}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_maps_ends_and_middle() {
        let s = Scale::linear(0.0, 100.0, 50.0, 550.0);
        assert_eq!(s.map(0.0), 50.0);
        assert_eq!(s.map(100.0), 550.0);
        assert_eq!(s.map(50.0), 300.0);
        // A y axis grows upwards: the range runs backwards.
        let y = Scale::linear(0.0, 1.0, 400.0, 40.0);
        assert_eq!(y.map(0.25), 310.0);
    }

    #[test]
    fn log_maps_decades_evenly() {
        let s = Scale::log(10.0, 10_000.0, 0.0, 300.0);
        for (v, px) in [
            (10.0, 0.0),
            (100.0, 100.0),
            (1000.0, 200.0),
            (10_000.0, 300.0),
        ] {
            assert!((s.map(v) - px).abs() < 1e-9, "{v} → {}", s.map(v));
        }
        assert_eq!(s.map(0.0), 0.0, "non-positive clamps to the start");
        assert_eq!(s.ticks(), vec![10.0, 100.0, 1000.0, 10_000.0]);
    }

    #[test]
    fn ticks_are_round_and_inside() {
        assert_eq!(
            linear_ticks(0.0, 10.0, 5),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
        assert_eq!(linear_ticks(0.0, 1.0, 4), vec![0.0, 0.5, 1.0]);
        let t = linear_ticks(3.0, 97.0, 6);
        assert!(
            t.iter().all(|&v| (3.0..=97.0).contains(&v)) && t.len() >= 4,
            "{t:?}"
        );
        // Less than a decade: 1-2-5 steps.
        assert_eq!(log_ticks(150.0, 900.0), vec![200.0, 500.0]);
        assert_eq!(tick_label(1500.0), "1.5k");
        assert_eq!(tick_label(20_000.0), "20k");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(3_000_000.0), "3M");
    }
}
