//! Dispatch to the kernel implementations. Everything `unsafe` in this crate lives below here.

pub(crate) mod reference;

use crate::{KernelKind, Matrix};

/// The CPU feature a kind needs and this CPU lacks, if any.
pub(crate) fn missing_feature(kind: KernelKind) -> Option<&'static str> {
    match kind {
        KernelKind::Reference => None,
        // The SIMD kernels land in arch/x86_64; until then they are refused, never faked.
        KernelKind::Avx2 => Some("an avx2 implementation in this build"),
        KernelKind::Avx512 => Some("an avx512 implementation in this build"),
        KernelKind::Gfni => Some("a gfni implementation in this build"),
    }
}

pub(crate) fn is_available(kind: KernelKind) -> bool {
    missing_feature(kind).is_none()
}

pub(crate) fn xor(kind: KernelKind, src: &[u8], dst: &mut [u8]) {
    match kind {
        _ => reference::xor(src, dst),
    }
}

pub(crate) fn mul(kind: KernelKind, c: u8, src: &[u8], dst: &mut [u8], add: bool) {
    match kind {
        _ => reference::mul(c, src, dst, add),
    }
}

pub(crate) fn dot_prod(
    kind: KernelKind,
    m: &Matrix,
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    add: bool,
) {
    match kind {
        _ => reference::dot_prod(m, inputs, outputs, add),
    }
}
