//! YCSB's request distributions, as its CoreWorkload defines them (the start of `inec bench
//! ycsb`, issue 9; not wired to a command yet): the zipfian generator of Gray et al. that YCSB
//! uses, its scrambled form (θ = 0.99 over 10^10 items, hashed with FNV-64 onto the records),
//! and uniform. Key names are [`super::load::KeyNames::Ycsb`].

use rand::Rng;

use super::load::ycsb_fnvhash64;

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
}
