//! YCSB's request distributions, as its CoreWorkload defines them: the zipfian generator of
//! Gray et al. that YCSB uses (also over a growing item count, for `latest`), its scrambled
//! form (θ = 0.99 over 10^10 items, hashed with FNV-64 onto the records), latest and uniform;
//! and the Weibull distribution of the degraded reads' and the failures' arrivals (the INEC
//! paper, §IV-B). Key names are [`crate::KeyNames::Ycsb`].

use rand::Rng;

use crate::ycsb_fnvhash64;

/// YCSB's `ZipfianGenerator.ZIPFIAN_CONSTANT`.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// YCSB's `ScrambledZipfianGenerator.ITEM_COUNT`.
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
/// YCSB's precomputed ζ(10^10, 0.99) (`ScrambledZipfianGenerator.ZETAN`).
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// ζ(n, θ) = Σ_{i=1..n} 1/i^θ.
pub fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// Items `0..items` with P(i) ∝ 1/(i+1)^θ (item 0 the most popular).
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    /// Computes ζ(items, θ) (O(items)).
    pub fn new(items: u64, theta: f64) -> Zipfian {
        Self::with_zetan(items, theta, zeta(items, theta))
    }

    /// With ζ(items, θ) given (YCSB precomputes it for the scrambled generator).
    pub fn with_zetan(items: u64, theta: f64, zetan: f64) -> Zipfian {
        let zeta2 = zeta(2, theta);
        let eta = (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipfian {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
        }
    }

    /// Items it draws from.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// Grows to `items` (more than now), extending ζ incrementally (YCSB's
    /// `ZipfianGenerator.nextLong(itemcount)` with a larger count). The η term uses the new
    /// count (YCSB keeps the first one there, an approximation we do not copy).
    pub fn grow(&mut self, items: u64) {
        if items <= self.items {
            return;
        }
        self.zetan += (self.items + 1..=items)
            .map(|i| 1.0 / (i as f64).powf(self.theta))
            .sum::<f64>();
        self.items = items;
        let zeta2 = zeta(2, self.theta);
        self.eta = (1.0 - (2.0 / items as f64).powf(1.0 - self.theta)) / (1.0 - zeta2 / self.zetan);
    }

    pub fn next<R: Rng>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let v = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        v.min(self.items - 1)
    }
}

/// YCSB's scrambled zipfian over `0..records`: a zipfian draw over 10^10 items, hashed with
/// FNV-64, modulo the record count, so the popular keys are spread over the key space.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    records: u64,
    gen: Zipfian,
}

impl ScrambledZipfian {
    pub fn new(records: u64) -> ScrambledZipfian {
        ScrambledZipfian {
            records,
            gen: Zipfian::with_zetan(SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN),
        }
    }

    pub fn next<R: Rng>(&self, rng: &mut R) -> u64 {
        (ycsb_fnvhash64(self.gen.next(rng)) as u64) % self.records
    }
}

/// YCSB's `latest` (`SkewedLatestGenerator`): with `last` the newest key number whose insert
/// completed, returns `last - z` where `z` is zipfian over `0..last`: the newest keys are the
/// most popular (key 0 is never drawn, as in YCSB, unless it is the only key).
#[derive(Clone, Debug)]
pub struct Latest {
    zipf: Zipfian,
}

impl Latest {
    /// For keys `0..=last` known at the start.
    pub fn new(last: u64) -> Latest {
        Latest {
            zipf: Zipfian::new(last.max(1), ZIPFIAN_CONSTANT),
        }
    }

    pub fn next<R: Rng>(&mut self, rng: &mut R, last: u64) -> u64 {
        if last == 0 {
            return 0;
        }
        self.zipf.grow(last);
        // The zipfian may have grown beyond `last` earlier (it never shrinks): redraw.
        loop {
            let z = self.zipf.next(rng);
            if z < last {
                return last - z;
            }
        }
    }
}

/// Γ(x) for x > 0 (Lanczos' approximation, g = 7, nine terms; relative error below 1e-13).
pub fn gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    #[allow(clippy::excessive_precision)]
    const C: [f64; 9] = [
        0.999_999_999_999_809_93,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_13,
        -176.615_029_162_140_59,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_571_6e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1-x) = π / sin(πx).
        return std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * gamma(1.0 - x));
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    (2.0 * std::f64::consts::PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * a
}

/// The Weibull distribution, shape k and scale λ: P(X ≤ x) = 1 - exp(-(x/λ)^k). With k < 1
/// (the paper's 0.7–0.8 for failures on HPC systems) arrivals come in bursts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weibull {
    pub shape: f64,
    pub scale: f64,
}

impl Weibull {
    /// The Weibull of this shape whose mean is `mean` (λ = mean / Γ(1 + 1/k)).
    pub fn with_mean(shape: f64, mean: f64) -> Weibull {
        Weibull {
            shape,
            scale: mean / gamma(1.0 + 1.0 / shape),
        }
    }

    pub fn mean(&self) -> f64 {
        self.scale * gamma(1.0 + 1.0 / self.shape)
    }

    pub fn cdf(&self, x: f64) -> f64 {
        if x <= 0.0 {
            0.0
        } else {
            1.0 - (-(x / self.scale).powf(self.shape)).exp()
        }
    }

    /// One draw by inversion.
    pub fn sample<R: Rng>(&self, rng: &mut R) -> f64 {
        let u: f64 = rng.gen();
        self.scale * (-(1.0 - u).ln()).powf(1.0 / self.shape)
    }
}

/// Which reads are forced degraded: a fraction `ratio` of the reads, their arrivals a Weibull
/// process counted in reads (the gaps between degraded reads, in reads, are Weibull with mean
/// 1/ratio). Under a steady request rate that is a Weibull process in time, as the paper's
/// modified YCSB; arrivals that fall within one read are served by the following reads, so the
/// long-run fraction is exactly `ratio`.
#[derive(Clone, Debug)]
pub struct DegradedArrivals {
    gaps: Weibull,
    position: f64,
    next_at: f64,
    pending: u64,
}

impl DegradedArrivals {
    /// `ratio` in (0, 1], `shape` > 0.
    pub fn new<R: Rng>(ratio: f64, shape: f64, rng: &mut R) -> DegradedArrivals {
        let gaps = Weibull::with_mean(shape, 1.0 / ratio);
        let next_at = gaps.sample(rng);
        DegradedArrivals {
            gaps,
            position: 0.0,
            next_at,
            pending: 0,
        }
    }

    /// Called for every read: whether this one is degraded.
    pub fn on_read<R: Rng>(&mut self, rng: &mut R) -> bool {
        self.position += 1.0;
        while self.next_at <= self.position {
            self.pending += 1;
            self.next_at += self.gaps.sample(rng);
        }
        if self.pending > 0 {
            self.pending -= 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn zipfian_frequencies_follow_the_law() {
        let n = 1000;
        let z = Zipfian::new(n, ZIPFIAN_CONSTANT);
        let mut rng = SmallRng::seed_from_u64(1);
        let draws = 400_000;
        let mut count = vec![0u64; n as usize];
        for _ in 0..draws {
            count[z.next(&mut rng) as usize] += 1;
        }
        let zetan = zeta(n, ZIPFIAN_CONSTANT);
        // Items 0 and 1 are exact in the algorithm; the tail is approximate (Gray et al.).
        for i in [0usize, 1] {
            let want = 1.0 / ((i + 1) as f64).powf(ZIPFIAN_CONSTANT) / zetan;
            let got = count[i] as f64 / draws as f64;
            assert!((got - want).abs() < 0.01, "item {i}: {got} vs {want}");
        }
        // Popularity falls: the first 10 items take far more than the last 500.
        let head: u64 = count[..10].iter().sum();
        let tail: u64 = count[500..].iter().sum();
        assert!(head > 2 * tail, "{head} {tail}");
    }

    #[test]
    fn scrambled_zeta_constant_and_range() {
        // YCSB's ZETAN is ζ(10^10, 0.99); check the formula on the constant's own terms by
        // the integral bound: ζ(n) lies between ∫1..n+1 and 1 + ∫1..n of x^-θ.
        let (t, n) = (ZIPFIAN_CONSTANT, SCRAMBLED_ITEM_COUNT as f64);
        let lo = ((n + 1.0).powf(1.0 - t) - 1.0) / (1.0 - t);
        let hi = 1.0 + (n.powf(1.0 - t) - 1.0) / (1.0 - t);
        assert!(lo < SCRAMBLED_ZETAN && SCRAMBLED_ZETAN < hi, "{lo} {hi}");
        let s = ScrambledZipfian::new(1000);
        let mut rng = SmallRng::seed_from_u64(2);
        let mut count = vec![0u64; 1000];
        for _ in 0..100_000 {
            count[s.next(&mut rng) as usize] += 1;
        }
        // Skewed: the most popular record gets far more than the uniform share (100).
        assert!(*count.iter().max().unwrap() > 1000);
    }

    #[test]
    fn gamma_known_values() {
        for (x, want) in [
            (1.0, 1.0),
            (2.0, 1.0),
            (5.0, 24.0),
            (0.5, std::f64::consts::PI.sqrt()),
            (1.5, std::f64::consts::PI.sqrt() / 2.0),
            (0.25, 3.625_609_908_221_908),
        ] {
            assert!(
                (gamma(x) - want).abs() < 1e-10 * want,
                "Γ({x}) = {}",
                gamma(x)
            );
        }
    }

    #[test]
    fn weibull_mean_and_cdf() {
        let w = Weibull::with_mean(0.75, 100.0);
        assert!((w.mean() - 100.0).abs() < 1e-9);
        let mut rng = SmallRng::seed_from_u64(3);
        let n = 400_000;
        let xs: Vec<f64> = (0..n).map(|_| w.sample(&mut rng)).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        assert!((mean - 100.0).abs() < 2.0, "mean {mean}");
        for x in [5.0, 30.0, 100.0, 300.0] {
            let emp = xs.iter().filter(|&&v| v <= x).count() as f64 / n as f64;
            assert!(
                (emp - w.cdf(x)).abs() < 0.005,
                "F({x}): {emp} vs {}",
                w.cdf(x)
            );
        }
        // Shape below 1: more spread than exponential (coefficient of variation above 1;
        // for k = 0.75 it is sqrt(Γ(1+2/k)/Γ(1+1/k)² - 1) ≈ 1.36).
        let var = xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        let cv = var.sqrt() / mean;
        let want = (gamma(1.0 + 2.0 / 0.75) / gamma(1.0 + 1.0 / 0.75).powi(2) - 1.0).sqrt();
        assert!((cv - want).abs() < 0.05, "cv {cv} vs {want}");
    }

    #[test]
    fn degraded_arrivals_ratio_and_bursts() {
        let mut rng = SmallRng::seed_from_u64(4);
        let mut d = DegradedArrivals::new(0.01, 0.75, &mut rng);
        let reads = 2_000_000;
        let mut marks = Vec::new();
        for i in 0..reads {
            if d.on_read(&mut rng) {
                marks.push(i as f64);
            }
        }
        let ratio = marks.len() as f64 / reads as f64;
        assert!((ratio - 0.01).abs() < 0.0005, "ratio {ratio}");
        // Gaps are bursty: their coefficient of variation is well above an exponential's 1.
        let gaps: Vec<f64> = marks.windows(2).map(|w| w[1] - w[0]).collect();
        let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let cv = (gaps.iter().map(|g| (g - m).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt() / m;
        assert!(cv > 1.2, "cv {cv}");
        // Same seed, same marks.
        let mut rng2 = SmallRng::seed_from_u64(4);
        let mut d2 = DegradedArrivals::new(0.01, 0.75, &mut rng2);
        let again: Vec<f64> = (0..reads)
            .filter(|_| d2.on_read(&mut rng2))
            .map(|i| i as f64)
            .collect();
        assert_eq!(again, marks);
    }

    #[test]
    fn zipfian_grows_like_a_fresh_one() {
        let mut g = Zipfian::new(100, ZIPFIAN_CONSTANT);
        g.grow(1000);
        let f = Zipfian::new(1000, ZIPFIAN_CONSTANT);
        assert!((g.zetan - f.zetan).abs() < 1e-9);
        assert!((g.eta - f.eta).abs() < 1e-12);
        assert_eq!(g.items(), 1000);
    }

    #[test]
    fn latest_prefers_the_newest() {
        let mut l = Latest::new(999);
        let mut rng = SmallRng::seed_from_u64(5);
        let draws = 300_000;
        let mut count = vec![0u64; 1000];
        for _ in 0..draws {
            let k = l.next(&mut rng, 999);
            assert!((1..=999).contains(&k));
            count[k as usize] += 1;
        }
        // The newest key (999) is zipfian rank 0: P = 1/ζ(999, θ); rank 1: 1/(2^θ ζ).
        let z = zeta(999, ZIPFIAN_CONSTANT);
        for (key, rank) in [(999usize, 1.0f64), (998, 2.0)] {
            let want = 1.0 / rank.powf(ZIPFIAN_CONSTANT) / z;
            let got = count[key] as f64 / draws as f64;
            assert!((got - want).abs() < 0.005, "key {key}: {got} vs {want}");
        }
        // More keys: the newest moves with them.
        let mut hits = 0;
        for _ in 0..10_000 {
            if l.next(&mut rng, 1999) == 1999 {
                hits += 1;
            }
        }
        let want = 1.0 / zeta(1999, ZIPFIAN_CONSTANT);
        assert!((hits as f64 / 10_000.0 - want).abs() < 0.02, "{hits}");
        assert_eq!(Latest::new(0).next(&mut rng, 0), 0);
    }
}
