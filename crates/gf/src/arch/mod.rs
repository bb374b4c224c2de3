//! Dispatch to the kernel implementations. Everything `unsafe` in this crate lives below here.
//!
//! A [`crate::Kernel`] holds an [`Imp`], which names one implementation. An `Imp` other than
//! `Reference` is only ever stored in a `Kernel` after [`resolve`] or [`resolve_gfni256`]
//! confirmed that this CPU has every feature the implementation needs; the dispatch functions
//! below rely on that invariant when they make the x86_64 feature tokens.

pub(crate) mod reference;

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

use crate::{KernelKind, Matrix};

/// What the SIMD implementations prepare for one matrix on first use (their blockings, kept
/// in the matrix).
#[derive(Clone, Debug, Default)]
pub(crate) struct Blockings {
    #[cfg(target_arch = "x86_64")]
    x86: x86_64::Blockings,
}

impl Blockings {
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn x86(&self) -> &x86_64::Blockings {
        &self.x86
    }
}

/// One implementation of the region kernels. [`KernelKind::Gfni`] has two: the 512-bit form,
/// preferred, and the 256-bit form used when AVX-512 is absent (and forcible for tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Imp {
    Reference,
    Avx2,
    Avx512,
    Gfni512,
    Gfni256,
}

impl Imp {
    pub(crate) fn kind(self) -> KernelKind {
        match self {
            Imp::Reference => KernelKind::Reference,
            Imp::Avx2 => KernelKind::Avx2,
            Imp::Avx512 => KernelKind::Avx512,
            Imp::Gfni512 | Imp::Gfni256 => KernelKind::Gfni,
        }
    }

    /// The kind's name, except `gfni256` for the 256-bit GFNI form.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Imp::Gfni256 => "gfni256",
            other => other.kind().name(),
        }
    }

    /// Bytes per SIMD register (1 for the scalar reference).
    pub(crate) fn vector_bytes(self) -> usize {
        match self {
            Imp::Reference => 1,
            Imp::Avx2 | Imp::Gfni256 => 32,
            Imp::Avx512 | Imp::Gfni512 => 64,
        }
    }

    /// The CPU features (names as `is_x86_feature_detected!` spells them) the implementation
    /// needs, in the order they are checked.
    fn required_features(self) -> &'static [&'static str] {
        match self {
            Imp::Reference => &[],
            Imp::Avx2 => &["avx2"],
            Imp::Avx512 => &["avx512f", "avx512bw"],
            Imp::Gfni512 => &["gfni", "avx512f", "avx512bw"],
            // The VEX form of `vgf2p8affineqb` needs only AVX, but the XORs between products
            // are AVX2 integer instructions; every CPU with GFNI and AVX has AVX2.
            Imp::Gfni256 => &["gfni", "avx2"],
        }
    }

    /// The first feature `has` says is missing.
    fn missing_with(self, has: &impl Fn(&str) -> bool) -> Option<&'static str> {
        self.required_features()
            .iter()
            .copied()
            .find(|feature| !has(feature))
    }
}

/// Whether this CPU has the named feature.
fn cpu_has(feature: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match feature {
            "avx2" => std::arch::is_x86_feature_detected!("avx2"),
            "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
            "avx512bw" => std::arch::is_x86_feature_detected!("avx512bw"),
            "gfni" => std::arch::is_x86_feature_detected!("gfni"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = feature;
        false
    }
}

/// The implementation of `kind` given the CPU features `has` reports, or the first missing
/// feature. GFNI prefers the 512-bit form and falls back to the 256-bit one.
fn resolve_with(kind: KernelKind, has: &impl Fn(&str) -> bool) -> Result<Imp, &'static str> {
    let check = |imp: Imp| match imp.missing_with(has) {
        None => Ok(imp),
        Some(missing) => Err(missing),
    };
    match kind {
        KernelKind::Reference => Ok(Imp::Reference),
        KernelKind::Avx2 => check(Imp::Avx2),
        KernelKind::Avx512 => check(Imp::Avx512),
        KernelKind::Gfni => check(Imp::Gfni512).or_else(|_| check(Imp::Gfni256)),
    }
}

/// The implementation of `kind` on this CPU, or the CPU feature it lacks.
pub(crate) fn resolve(kind: KernelKind) -> Result<Imp, &'static str> {
    resolve_with(kind, &cpu_has)
}

/// The 256-bit GFNI form on this CPU, or the CPU feature it lacks.
pub(crate) fn resolve_gfni256() -> Result<Imp, &'static str> {
    match Imp::Gfni256.missing_with(&cpu_has) {
        None => Ok(Imp::Gfni256),
        Some(missing) => Err(missing),
    }
}

/// The CPU feature a kind needs and this CPU lacks, if any.
pub(crate) fn missing_feature(kind: KernelKind) -> Option<&'static str> {
    resolve(kind).err()
}

pub(crate) fn is_available(kind: KernelKind) -> bool {
    missing_feature(kind).is_none()
}

/// `dst ^= src`; the lengths are equal.
pub(crate) fn xor(imp: Imp, src: &[u8], dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = x86_64::Token::for_imp(imp) {
        return simd.xor(src, dst);
    }
    let _ = imp;
    reference::xor(src, dst)
}

/// `dst = c · src` or `dst ^= c · src`; the lengths are equal.
pub(crate) fn mul(imp: Imp, c: u8, src: &[u8], dst: &mut [u8], add: bool) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = x86_64::Token::for_imp(imp) {
        return simd.mul(c, src, dst, add);
    }
    let _ = imp;
    reference::mul(c, src, dst, add)
}

/// `outputs = m · inputs` or `outputs ^= m · inputs`; the shapes agree and the lengths are
/// equal.
pub(crate) fn dot_prod(
    imp: Imp,
    m: &Matrix,
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    add: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = x86_64::Token::for_imp(imp) {
        return simd.dot_prod(m, inputs, outputs, add);
    }
    let _ = imp;
    crate::check_shapes(m, inputs, outputs);
    reference::dot_prod(m, inputs, outputs, add)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(features: &'static [&'static str]) -> impl Fn(&str) -> bool {
        move |f| features.contains(&f)
    }

    #[test]
    fn reference_needs_nothing() {
        assert_eq!(
            resolve_with(KernelKind::Reference, &cpu(&[])),
            Ok(Imp::Reference)
        );
    }

    #[test]
    fn missing_features_are_named() {
        let none = cpu(&[]);
        assert_eq!(resolve_with(KernelKind::Avx2, &none), Err("avx2"));
        assert_eq!(resolve_with(KernelKind::Avx512, &none), Err("avx512f"));
        assert_eq!(resolve_with(KernelKind::Gfni, &none), Err("gfni"));
        let avx512f_only = cpu(&["avx2", "avx512f"]);
        assert_eq!(
            resolve_with(KernelKind::Avx512, &avx512f_only),
            Err("avx512bw")
        );
        // GFNI present, but neither AVX-512 nor AVX2: the 256-bit form's need is reported.
        assert_eq!(resolve_with(KernelKind::Gfni, &cpu(&["gfni"])), Err("avx2"));
    }

    #[test]
    fn gfni_prefers_the_512_bit_form() {
        let all = cpu(&["avx2", "avx512f", "avx512bw", "gfni"]);
        assert_eq!(resolve_with(KernelKind::Gfni, &all), Ok(Imp::Gfni512));
        assert_eq!(resolve_with(KernelKind::Avx512, &all), Ok(Imp::Avx512));
        // An AVX2-only CPU with GFNI (e.g. Alder Lake) gets the 256-bit form.
        let client = cpu(&["avx2", "gfni"]);
        assert_eq!(resolve_with(KernelKind::Gfni, &client), Ok(Imp::Gfni256));
        assert_eq!(resolve_with(KernelKind::Avx512, &client), Err("avx512f"));
    }

    #[test]
    fn unknown_features_are_absent() {
        assert!(!cpu_has("no-such-feature"));
    }
}
