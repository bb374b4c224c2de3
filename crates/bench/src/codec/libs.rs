//! The libraries run in this process: inec, ISA-L (feature `isal`), reed-solomon-erasure,
//! reed-solomon-simd and the XOR roofline. (klauspost/reedsolomon runs in its own process:
//! `klauspost.rs`.)

use super::timing::Part;
use super::{Cell, Op, Pattern};
use crate::{BenchError, Result};

impl From<reed_solomon_simd::Error> for BenchError {
    fn from(e: reed_solomon_simd::Error) -> BenchError {
        BenchError::library("reed-solomon-simd", e.to_string())
    }
}
use codes::{Code, MatrixKind};
use gf::{field, Kernel, Matrix};

/// Whose parity a library's buffer sets hold. Libraries of one family share buffer sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// ISA-L `gf_gen_cauchy1_matrix` parity (RS; `rs-xor`: its columns scaled), or Azure LRC
    /// parity as docs/chunk-format.md defines it: inec, ISA-L, klauspost with `WithCauchyMatrix` (or
    /// `WithCustomMatrix` for `rs-xor`), the XOR roofline.
    Cauchy,
    /// reed-solomon-erasure's own matrix.
    Erasure,
    /// reed-solomon-simd's Leopard code.
    Simd,
}

/// A library benchmarked in this process.
pub trait Library: Sync {
    /// Name in the output.
    fn name(&self) -> &'static str;
    fn family(&self) -> Family;
    /// The implementation that runs for this cell.
    fn kernel(&self, cell: &Cell) -> String;
    /// `Err(BenchError::Unsupported(why))` if the library cannot run this cell.
    fn supports(&self, cell: &Cell) -> Result<()>;
    /// One thread's share of the cell's call over buffer sets `sets` (`sets[s][i]`: that
    /// thread's byte range of chunk i of set s; index n is the scratch chunk).
    fn bind<'a>(&'a self, cell: &'a Cell, sets: Vec<Vec<&'a mut [u8]>>) -> Result<Part<'a>>;
}

/// Moves the chunk views of one set into the inputs and the outputs of a call.
fn pick<'a>(
    chunks: Vec<&'a mut [u8]>,
    inputs: &[usize],
    outputs: &[usize],
) -> (Vec<&'a [u8]>, Vec<&'a mut [u8]>) {
    let mut slots: Vec<Option<&'a mut [u8]>> = chunks.into_iter().map(Some).collect();
    let outs = outputs
        .iter()
        .map(|&i| {
            slots[i]
                .take()
                .expect("a chunk is an input or an output once")
        })
        .collect();
    let ins = inputs
        .iter()
        .map(|&i| -> &'a [u8] {
            slots[i]
                .take()
                .expect("a chunk is an input or an output once")
        })
        .collect();
    (ins, outs)
}

/// The generator matrix of the Cauchy family, `n × k` row-major, identity on top, written
/// here from docs/chunk-format.md independently of the `codes` crate so that the benchmark's expected
/// parity does not come from the code under test.
pub fn reference_generator(code: Code) -> Vec<u8> {
    let (k, n) = (code.k(), code.n());
    let mut g = vec![0u8; n * k];
    for j in 0..k {
        g[j * k + j] = 1;
    }
    match code {
        Code::Rs {
            matrix: MatrixKind::CauchyXor,
            ..
        } => {
            // ISA-L's Cauchy entry inv(i XOR j), column j scaled by 1 / inv(k XOR j).
            for i in k..n {
                for j in 0..k {
                    g[i * k + j] = field::div((k ^ j) as u8, (i ^ j) as u8);
                }
            }
        }
        Code::Rs { .. } => {
            for i in k..n {
                for j in 0..k {
                    g[i * k + j] = field::inv((i ^ j) as u8);
                }
            }
        }
        Code::Lrc { l, r, .. } => {
            let group = k / l;
            for j in 0..k {
                g[(k + j / group) * k + j] = 1;
                let alpha = field::exp2(j as u32 + 1);
                for t in 0..r {
                    g[(k + l + t) * k + j] = field::pow(alpha, t as u32 + 1);
                }
            }
        }
    }
    g
}

/// `rows` of `g` (each `k` wide), concatenated.
#[cfg(feature = "isal")]
fn rows_of(g: &[u8], k: usize, rows: &[usize]) -> Vec<u8> {
    rows.iter()
        .flat_map(|&r| g[r * k..(r + 1) * k].iter().copied())
        .collect()
}

// ---------------------------------------------------------------------------------------
// inec

/// inec's codec, with one kernel.
#[derive(Debug)]
pub struct Inec {
    /// With the default decoder LRU; the `cached` pattern reuses the calculator it returns.
    codec: codes::Codec,
    /// With the decoder cache disabled (capacity 0): every `decoder` call solves the pattern
    /// and prepares its tables, the `fresh` pattern.
    uncached: codes::Codec,
    kernel: Kernel,
}

impl Inec {
    pub fn new(code: Code, kernel: Kernel) -> Result<Inec> {
        Ok(Inec {
            codec: codes::Codec::try_new(code, kernel, codes::DEFAULT_DECODER_CACHE_CAPACITY)?,
            uncached: codes::Codec::try_new(code, kernel, 0)?,
            kernel,
        })
    }

    pub fn codec(&self) -> &codes::Codec {
        &self.codec
    }
}

impl Library for Inec {
    fn name(&self) -> &'static str {
        "inec"
    }
    fn family(&self) -> Family {
        Family::Cauchy
    }
    fn kernel(&self, _cell: &Cell) -> String {
        self.kernel.name().to_string()
    }
    fn supports(&self, _cell: &Cell) -> Result<()> {
        Ok(())
    }
    fn bind<'a>(&'a self, cell: &'a Cell, sets: Vec<Vec<&'a mut [u8]>>) -> Result<Part<'a>> {
        let mut bufs: Vec<_> = sets
            .into_iter()
            .map(|c| pick(c, &cell.inputs, &cell.outputs))
            .collect();
        let (codec, uncached) = (&self.codec, &self.uncached);
        Ok(match (cell.op, cell.pattern) {
            (Op::Encode, _) => Box::new(move |s| {
                let (ins, outs) = &mut bufs[s];
                codec.encode(ins, outs).expect("inec encode");
            }),
            (_, Pattern::Cached) => {
                // The prepared calculator of the pattern is taken from the codec's cache once
                // and reused, as ISA-L's caller reuses its `ec_init_tables` output. (A cache
                // hit through `Codec::decoder` costs about 40 ns more per call.)
                let calc = codec.decoder(&cell.inputs, &cell.outputs)?;
                Box::new(move |s| {
                    let (ins, outs) = &mut bufs[s];
                    calc.compute(ins, outs).expect("inec decode");
                })
            }
            (_, Pattern::Fresh) => Box::new(move |s| {
                let (ins, outs) = &mut bufs[s];
                let calc = uncached
                    .decoder(&cell.inputs, &cell.outputs)
                    .expect("inec decoder");
                calc.compute(ins, outs).expect("inec decode");
            }),
        })
    }
}

// ---------------------------------------------------------------------------------------
// ISA-L

/// ISA-L 2.31: `ec_encode_data` with tables from `ec_init_tables`; RS with its own
/// `gf_gen_cauchy1_matrix`, `rs-xor` and LRC with the reference generator; decode matrices by
/// `gf_invert_matrix` of the survivors' rows, as ISA-L's examples do.
#[cfg(feature = "isal")]
#[derive(Debug)]
pub struct Isal {
    code: Code,
    generator: Vec<u8>,
    isa: crate::isal::Isa,
}

#[cfg(feature = "isal")]
impl Isal {
    /// ISA-L for `code`, its kernels at the level `isa` (checked by the caller).
    pub fn new(code: Code, isa: crate::isal::Isa) -> Isal {
        let generator = match code {
            Code::Rs {
                k,
                m,
                matrix: MatrixKind::Cauchy,
            } => crate::isal::gen_cauchy1_matrix(k, m),
            _ => reference_generator(code),
        };
        Isal {
            code,
            generator,
            isa,
        }
    }

    /// The `outputs.len() × inputs.len()` matrix that rebuilds `outputs` from `inputs`.
    fn decode_matrix(&self, inputs: &[usize], outputs: &[usize]) -> Result<Vec<u8>> {
        let k = self.code.k();
        let g = &self.generator;
        if inputs.len() == k {
            // Invert the survivors' rows; wanted row w is then G[w] · inverse.
            let sub = rows_of(g, k, inputs);
            let inv = crate::isal::invert_matrix(&sub, k).ok_or_else(|| {
                BenchError::library("isal", format!("survivors {inputs:?} are singular"))
            })?;
            let mut d = Vec::with_capacity(outputs.len() * k);
            for &w in outputs {
                for c in 0..k {
                    d.push((0..k).fold(0, |s, t| s ^ field::mul(g[w * k + t], inv[t * k + c])));
                }
            }
            return Ok(d);
        }
        // A local repair: one lost data chunk from the rest of its group and the group's
        // local parity p: d_w = (p + Σ_{j≠w} g[p][j]·d_j) / g[p][w].
        let (&[w], Some(&p)) = (outputs, inputs.iter().find(|&&i| i >= k)) else {
            return Err(BenchError::library(
                "isal",
                format!("no decode for inputs {inputs:?} outputs {outputs:?}"),
            ));
        };
        let cw = g[p * k + w];
        Ok(inputs
            .iter()
            .map(|&i| {
                if i == p {
                    field::inv(cw)
                } else {
                    field::div(g[p * k + i], cw)
                }
            })
            .collect())
    }

    pub fn generator(&self) -> &[u8] {
        &self.generator
    }
}

#[cfg(feature = "isal")]
impl Library for Isal {
    fn name(&self) -> &'static str {
        "isal"
    }
    fn family(&self) -> Family {
        Family::Cauchy
    }
    fn kernel(&self, _cell: &Cell) -> String {
        self.isa.kernel_name().to_string()
    }
    fn supports(&self, _cell: &Cell) -> Result<()> {
        Ok(())
    }
    fn bind<'a>(&'a self, cell: &'a Cell, sets: Vec<Vec<&'a mut [u8]>>) -> Result<Part<'a>> {
        use crate::isal::{Call, Tables};
        let k = self.code.k();
        let coeffs = match cell.op {
            Op::Encode => self.generator[k * k..].to_vec(),
            _ => self.decode_matrix(&cell.inputs, &cell.outputs)?,
        };
        let mut tables = Tables::with_isa(cell.inputs.len(), cell.outputs.len(), &coeffs, self.isa);
        let mut calls: Vec<Call<'a>> = sets
            .into_iter()
            .map(|c| {
                let (ins, outs) = pick(c, &cell.inputs, &cell.outputs);
                Call::new(&ins, outs)
            })
            .collect();
        Ok(match (cell.op, cell.pattern) {
            (Op::Encode, _) | (_, Pattern::Cached) => Box::new(move |s| calls[s].run(&tables)),
            (_, Pattern::Fresh) => Box::new(move |s| {
                let d = self
                    .decode_matrix(&cell.inputs, &cell.outputs)
                    .expect("isal decode matrix");
                tables.reinit(cell.inputs.len(), cell.outputs.len(), &d);
                calls[s].run(&tables);
            }),
        })
    }
}

// ---------------------------------------------------------------------------------------
// reed-solomon-erasure

/// reed-solomon-erasure 6 (GF(2^8), its C SIMD code built for Haswell): `encode_sep`, and
/// `reconstruct_data` over `(chunk, present)` pairs.
pub struct Erasure {
    rs: reed_solomon_erasure::galois_8::ReedSolomon,
}

impl std::fmt::Debug for Erasure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Erasure")
    }
}

/// `(k, m)` of an `rs:K,M` code, for a library that uses its own matrix: it runs in the rows
/// of `rs` (whose parity it does not share either, see `Family`), not in those of `rs-xor`,
/// which are about that matrix.
fn own_matrix_rs(code: Code, library: &str) -> Result<(usize, usize)> {
    match code {
        Code::Rs {
            k,
            m,
            matrix: MatrixKind::Cauchy,
        } => Ok((k, m)),
        _ => Err(BenchError::library(library, "rs:K,M codes only")),
    }
}

impl Erasure {
    pub fn new(code: Code) -> Result<Erasure> {
        let (k, m) = own_matrix_rs(code, "reed-solomon-erasure")?;
        Ok(Erasure {
            rs: reed_solomon_erasure::galois_8::ReedSolomon::new(k, m)
                .map_err(|e| BenchError::library("reed-solomon-erasure", format!("{e:?}")))?,
        })
    }

    /// Encodes one stripe (data chunks, then parity chunks).
    pub fn encode(&self, stripe: &mut [super::data::Chunk]) -> Result<()> {
        let (data, parity) = stripe.split_at_mut(self.rs.data_shard_count());
        let parity = &mut parity[..self.rs.parity_shard_count()];
        self.rs
            .encode_sep(data, parity)
            .map_err(|e| BenchError::library("reed-solomon-erasure", format!("encode: {e:?}")))
    }

    /// Rebuilds the data chunks in `lost` of one stripe from the others.
    pub fn reconstruct(&self, stripe: &mut [super::data::Chunk], lost: &[usize]) -> Result<()> {
        let n = self.rs.total_shard_count();
        let mut shards: Vec<(&mut [u8], bool)> = stripe[..n]
            .iter_mut()
            .enumerate()
            .map(|(i, c)| (&mut c[..], !lost.contains(&i)))
            .collect();
        self.rs
            .reconstruct_data(&mut shards)
            .map_err(|e| BenchError::library("reed-solomon-erasure", format!("reconstruct: {e:?}")))
    }
}

impl Library for Erasure {
    fn name(&self) -> &'static str {
        "reed-solomon-erasure"
    }
    fn family(&self) -> Family {
        Family::Erasure
    }
    fn kernel(&self, _cell: &Cell) -> String {
        "simd-c-haswell".to_string()
    }
    fn supports(&self, cell: &Cell) -> Result<()> {
        if !matches!(cell.code, Code::Rs { .. }) {
            return Err(BenchError::Unsupported("RS only"));
        }
        if cell.op != Op::Encode && cell.pattern == Pattern::Fresh {
            return Err(BenchError::Unsupported(
                "its decode-matrix cache cannot be bypassed",
            ));
        }
        Ok(())
    }
    fn bind<'a>(&'a self, cell: &'a Cell, sets: Vec<Vec<&'a mut [u8]>>) -> Result<Part<'a>> {
        let rs = &self.rs;
        if cell.op == Op::Encode {
            let mut bufs: Vec<_> = sets
                .into_iter()
                .map(|c| pick(c, &cell.inputs, &cell.outputs))
                .collect();
            return Ok(Box::new(move |s| {
                let (ins, outs) = &mut bufs[s];
                rs.encode_sep(ins, outs)
                    .expect("reed-solomon-erasure encode");
            }));
        }
        let n = cell.code.n();
        let mut bufs: Vec<Vec<(&'a mut [u8], bool)>> = sets
            .into_iter()
            .map(|c| c.into_iter().take(n).map(|v| (v, true)).collect())
            .collect();
        Ok(Box::new(move |s| {
            let shards = &mut bufs[s];
            // It marks rebuilt chunks present; mark the lost ones missing again.
            for &i in &cell.outputs {
                shards[i].1 = false;
            }
            rs.reconstruct_data(shards)
                .expect("reed-solomon-erasure reconstruct");
        }))
    }
}

// ---------------------------------------------------------------------------------------
// reed-solomon-simd

/// reed-solomon-simd 3 (Leopard-style FFT code over GF(2^16)): a different code, so its parity
/// differs from the Cauchy family's. Its API copies the chunks in and hands results out of
/// its own buffers; each call here copies the results into the caller's chunk buffers.
#[derive(Debug)]
pub struct Simd {
    k: usize,
    m: usize,
}

impl Simd {
    pub fn new(code: Code) -> Result<Simd> {
        let (k, m) = own_matrix_rs(code, "reed-solomon-simd")?;
        Ok(Simd { k, m })
    }

    /// Encodes one stripe (data chunks, then parity chunks).
    pub fn encode(&self, stripe: &mut [super::data::Chunk]) -> Result<()> {
        let mut enc = reed_solomon_simd::ReedSolomonEncoder::new(self.k, self.m, stripe[0].len())?;
        for d in &stripe[..self.k] {
            enc.add_original_shard(d)?;
        }
        let out = enc.encode()?;
        for (p, r) in stripe[self.k..self.k + self.m]
            .iter_mut()
            .zip(out.recovery_iter())
        {
            p.copy_from_slice(r);
        }
        Ok(())
    }

    /// Rebuilds the data chunks in `lost` of one stripe from the first k other chunks.
    pub fn reconstruct(&self, stripe: &mut [super::data::Chunk], lost: &[usize]) -> Result<()> {
        let mut dec = reed_solomon_simd::ReedSolomonDecoder::new(self.k, self.m, stripe[0].len())?;
        let avail: Vec<usize> = (0..self.k + self.m)
            .filter(|i| !lost.contains(i))
            .take(self.k)
            .collect();
        for &i in &avail {
            if i < self.k {
                dec.add_original_shard(i, &stripe[i])?;
            } else {
                dec.add_recovery_shard(i - self.k, &stripe[i])?;
            }
        }
        let out = dec.decode()?;
        let restored: Vec<(usize, Vec<u8>)> = out
            .restored_original_iter()
            .map(|(i, d)| (i, d.to_vec()))
            .collect();
        drop(out);
        for (i, d) in restored {
            stripe[i].copy_from_slice(&d);
        }
        Ok(())
    }
}

impl Library for Simd {
    fn name(&self) -> &'static str {
        "reed-solomon-simd"
    }
    fn family(&self) -> Family {
        Family::Simd
    }
    fn kernel(&self, _cell: &Cell) -> String {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                return "avx2".into();
            }
            if std::arch::is_x86_feature_detected!("ssse3") {
                return "ssse3".into();
            }
        }
        "nosimd".into()
    }
    fn supports(&self, cell: &Cell) -> Result<()> {
        if !matches!(cell.code, Code::Rs { .. }) {
            return Err(BenchError::Unsupported("RS only"));
        }
        if !cell.chunk_bytes.is_multiple_of(2 * cell.threads) {
            return Err(BenchError::Unsupported(
                "needs an even number of bytes per thread",
            ));
        }
        Ok(())
    }
    fn bind<'a>(&'a self, cell: &'a Cell, sets: Vec<Vec<&'a mut [u8]>>) -> Result<Part<'a>> {
        let (k, m) = (self.k, self.m);
        let mut bufs: Vec<_> = sets
            .into_iter()
            .map(|c| pick(c, &cell.inputs, &cell.outputs))
            .collect();
        let len = bufs[0].0[0].len();
        if cell.op == Op::Encode {
            let mut enc = reed_solomon_simd::ReedSolomonEncoder::new(k, m, len)?;
            return Ok(Box::new(move |s| {
                let (ins, outs) = &mut bufs[s];
                for d in ins.iter() {
                    enc.add_original_shard(d).expect("reed-solomon-simd add");
                }
                let r = enc.encode().expect("reed-solomon-simd encode");
                for (o, p) in outs.iter_mut().zip(r.recovery_iter()) {
                    o.copy_from_slice(p);
                }
            }));
        }
        let mut dec = reed_solomon_simd::ReedSolomonDecoder::new(k, m, len)?;
        Ok(Box::new(move |s| {
            let (ins, outs) = &mut bufs[s];
            for (&i, d) in cell.inputs.iter().zip(ins.iter()) {
                if i < k {
                    dec.add_original_shard(i, d).expect("reed-solomon-simd add");
                } else {
                    dec.add_recovery_shard(i - k, d)
                        .expect("reed-solomon-simd add");
                }
            }
            let r = dec.decode().expect("reed-solomon-simd decode");
            for (&i, o) in cell.outputs.iter().zip(outs.iter_mut()) {
                o.copy_from_slice(r.restored_original(i).expect("restored chunk"));
            }
        }))
    }
}

// ---------------------------------------------------------------------------------------
// XOR roofline

/// The memory ceiling: one pass XORing the chunks the cell's call reads into one scratch
/// chunk (gf `dot_prod` with an all-ones row: XOR for coefficient 1).
#[derive(Debug)]
pub struct XorRoofline {
    kernel: Kernel,
}

impl XorRoofline {
    pub fn new(kernel: Kernel) -> XorRoofline {
        XorRoofline { kernel }
    }
}

impl Library for XorRoofline {
    fn name(&self) -> &'static str {
        "xor-roofline"
    }
    fn family(&self) -> Family {
        Family::Cauchy
    }
    fn kernel(&self, _cell: &Cell) -> String {
        format!("xor-{}", self.kernel.name())
    }
    fn supports(&self, _cell: &Cell) -> Result<()> {
        Ok(())
    }
    fn bind<'a>(&'a self, cell: &'a Cell, sets: Vec<Vec<&'a mut [u8]>>) -> Result<Part<'a>> {
        let scratch = [cell.code.n()];
        let mut bufs: Vec<_> = sets
            .into_iter()
            .map(|c| pick(c, &cell.inputs, &scratch))
            .collect();
        let ones = Matrix::new(1, cell.inputs.len(), &vec![1u8; cell.inputs.len()]);
        let kernel = self.kernel;
        Ok(Box::new(move |s| {
            let (ins, outs) = &mut bufs[s];
            kernel.dot_prod(&ones, ins, outs);
        }))
    }
}
