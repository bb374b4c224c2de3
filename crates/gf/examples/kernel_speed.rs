//! Throughput of `dot_prod` (the encode kernel) for every kernel this CPU runs, hot cache, one
//! thread, in GB/s of data (k · chunk_bytes per call), beside a plain k-input XOR pass over the
//! same inputs (the memory roofline: one load per input byte, nothing computed).
//!
//! ```text
//! cargo run --release -p inec-gf --example kernel_speed [-- SECONDS_PER_CELL [KERNEL...]]
//! ```
//!
//! With kernel names (`avx2`, `gfni256`, ...), only those run. `CHUNKS=4096,65536` sets the
//! chunk sizes; `SHAPES=10+4,10+1` the shapes. `PLACE` sets where the chunks lie:
//! - `vec` (the default): one `Vec` per chunk, wherever the allocator puts it;
//! - `exact`: back to back in one page-aligned region (stride `chunk_bytes`), as Go places
//!   `make([]byte, 128 KiB)` buffers: every chunk has the same address modulo 128 KiB, so all
//!   of them map to the same L1 sets (and, at 128 KiB, the same L2 sets);
//! - `page`: page-aligned with a page between chunks (stride `chunk_bytes + 4096`), as large
//!   `malloc` blocks from `mmap` lie: the same L1 sets, different L2 sets;
//! - `heap`: back to back 16 bytes apart (stride `chunk_bytes + 16`), as `malloc` places
//!   blocks on the heap: different misalignments, the same L1 and L2 sets;
//! - `stagger`: page-aligned plus a different multiple of 64 bytes for each chunk, so the
//!   chunks map to different L1 sets;
//! - `delta:D`: the inputs as `page`, the outputs D bytes further (D < 4096): every output lies
//!   D bytes after every input modulo 4096 (the 4K aliasing of a kernel's loads with its
//!   stores: see `walk_back` in `src/arch/x86_64/mod.rs`).
//!
//! `XOR_ROWS=r` makes the first r rows of every matrix all ones (XOR rows); `LOCAL_ROWS=l`
//! makes the first l rows an LRC's local parities (row g: ones over the g-th of l groups).
//!
//! `SHIFT=16` adds 16 bytes to every chunk's address in a region (as `malloc` does to a block
//! from `mmap`: all chunks misaligned alike); `SHIFT=step16` adds 16·(j mod 4) + 64·j to
//! chunk j (the chunks misaligned differently).

use std::hint::black_box;
use std::time::{Duration, Instant};

use gf::{Kernel, Matrix};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Calls `f` in batches for about `budget` and returns the best calls per second of a batch.
fn best_rate(budget: Duration, mut f: impl FnMut()) -> f64 {
    // Warm up and size a batch to about 10 ms.
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < Duration::from_millis(10) {
        f();
        calls += 1;
    }
    let batch = calls.max(1);
    let mut best = 0f64;
    let start = Instant::now();
    while start.elapsed() < budget {
        let t = Instant::now();
        for _ in 0..batch {
            f();
        }
        best = best.max(batch as f64 / t.elapsed().as_secs_f64());
    }
    best
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.3);
    let budget = Duration::from_secs_f64(seconds);
    let only: Vec<String> = std::env::args().skip(2).collect();
    let kernels: Vec<Kernel> = Kernel::forms()
        .into_iter()
        .filter(|k| only.is_empty() || only.iter().any(|n| n == k.name()))
        .collect();
    let shapes: Vec<(usize, usize)> = std::env::var("SHAPES")
        .map(|v| {
            v.split(',')
                .map(|s| {
                    let (k, m) = s.split_once('+').expect("SHAPES=k+m,...");
                    (k.parse().unwrap(), m.parse().unwrap())
                })
                .collect()
        })
        .unwrap_or(vec![(6, 3), (10, 3), (10, 4), (12, 3), (12, 4), (20, 4)]);
    let place = std::env::var("PLACE").unwrap_or("vec".into());
    let chunk_sizes: Vec<usize> = std::env::var("CHUNKS")
        .map(|v| v.split(",").map(|x| x.parse().unwrap()).collect())
        .unwrap_or(vec![4 << 10, 128 << 10]);
    let mut rng = SmallRng::seed_from_u64(42);

    println!(
        "dot_prod, hot cache, one thread, GB/s of data (k · chunk_bytes per call); best kernel: {}",
        gf::kernel_name()
    );
    print!("{:>6} {:>11}", "k+m", "chunk_bytes");
    for k in &kernels {
        print!(" {:>9}", k.name());
    }
    println!(" {:>9}", "xor-k");

    for &chunk_bytes in &chunk_sizes {
        for &(k, m) in &shapes {
            // A Cauchy-like matrix with no 0 or 1: every product is a real multiplication;
            // with `XOR_ROWS=r`, the first r rows all ones (an `rs-xor` parity, LRC locals).
            let xor_rows: usize = std::env::var("XOR_ROWS").map_or(0, |v| v.parse().unwrap());
            // With `LOCAL_ROWS=l`, the first l rows are an LRC's local parities: row g all
            // ones over the g-th of l equal groups of the inputs, zeros elsewhere.
            let local_rows: usize = std::env::var("LOCAL_ROWS").map_or(0, |v| v.parse().unwrap());
            let coeffs: Vec<u8> = (0..k * m)
                .map(|i| {
                    let (r, c) = (i / k, i % k);
                    if r < local_rows {
                        u8::from(c * local_rows / k == r)
                    } else if r < xor_rows {
                        1
                    } else {
                        rng.gen_range(2..=255)
                    }
                })
                .collect();
            let matrix = Matrix::new(m, k, &coeffs);
            // Chunk j (inputs, then outputs) at offset start(j) of one region, or in its own Vec.
            let shift = std::env::var("SHIFT").unwrap_or("0".into());
            let shift = |j: usize| match shift.as_str() {
                "step16" => 16 * (j % 4),
                n => n.parse::<usize>().expect("SHIFT"),
            };
            let pages = chunk_bytes.next_multiple_of(4096);
            // Offset of chunk j in the region; None: its own Vec.
            let start = |j: usize| {
                match place.as_str() {
                    "exact" => Some(j * chunk_bytes),
                    "page" => Some(j * (pages + 4096)),
                    "heap" => Some(16 + j * (chunk_bytes + 16)),
                    "stagger" => Some(j * (pages + 4096) + 64 * ((7 * j) % 64)),
                    "vec" => None,
                    p => match p.strip_prefix("delta:") {
                        // Inputs as `page`, outputs D bytes further (modulo 4096).
                        Some(d) => Some(
                            j * (pages + 4096)
                                + usize::from(j >= k) * d.parse::<usize>().expect("PLACE=delta:D"),
                        ),
                        None => panic!("unknown PLACE={p}"),
                    },
                }
                .map(|o| o + shift(j) + 64 * usize::from(shift(1) > 0) * j)
            };
            let mut region = vec![0u8; (k + m) * (pages + 4096 + 4096) + 4096];
            let base = region.as_ptr().align_offset(4096);
            let mut rest = &mut region[base..];
            let mut used = 0;
            let mut chunks: Vec<&mut [u8]> = Vec::new();
            let mut owned: Vec<Vec<u8>> = Vec::new();
            for j in 0..k + m {
                match start(j) {
                    None => owned.push(vec![0u8; chunk_bytes]),
                    Some(o) => {
                        let (_, tail) = std::mem::take(&mut rest).split_at_mut(o - used);
                        let (this, tail) = tail.split_at_mut(chunk_bytes);
                        rest = tail;
                        used = o + chunk_bytes;
                        chunks.push(this);
                    }
                }
            }
            chunks.extend(owned.iter_mut().map(|v| &mut v[..]));
            let (ins_mut, outputs) = chunks.split_at_mut(k);
            for c in ins_mut.iter_mut() {
                rng.fill(&mut c[..]);
            }
            let ins: Vec<&[u8]> = ins_mut.iter().map(|c| &c[..]).collect();
            if std::env::var("PRINT_ADDR").is_ok() {
                let addrs: Vec<usize> = ins.iter().map(|c| c.as_ptr() as usize).collect();
                let outs: Vec<usize> = outputs.iter().map(|c| c.as_ptr() as usize).collect();
                eprintln!("inputs {addrs:x?}\noutputs {outs:x?}");
            }
            let mut expected = vec![vec![0u8; chunk_bytes]; m];
            {
                let mut outs: Vec<&mut [u8]> = expected.iter_mut().map(|v| &mut v[..]).collect();
                Kernel::reference().dot_prod(&matrix, &ins, &mut outs);
            }
            let data_bytes = (k * chunk_bytes) as f64;
            print!("{:>6} {:>11}", format!("{k}+{m}"), chunk_bytes);
            for &kernel in &kernels {
                let mut outs: Vec<&mut [u8]> = outputs.iter_mut().map(|v| &mut v[..]).collect();
                kernel.dot_prod(&matrix, &ins, &mut outs);
                assert!(
                    outs.iter().zip(&expected).all(|(o, e)| o[..] == e[..]),
                    "{} is wrong",
                    kernel.name()
                );
                let rate = best_rate(budget, || {
                    kernel.dot_prod(&matrix, black_box(&ins), &mut outs);
                    black_box(&mut outs);
                });
                print!(" {:>9.2}", rate * data_bytes / 1e9);
            }
            // The roofline: one output, the XOR of the k inputs, by the best kernel.
            let ones = Matrix::new(1, k, &vec![1u8; k]);
            let xor_out = &mut *outputs[0];
            let best = Kernel::best();
            let rate = best_rate(budget, || {
                best.dot_prod(&ones, black_box(&ins), &mut [&mut *xor_out]);
                black_box(&mut *xor_out);
            });
            println!(" {:>9.2}", rate * data_bytes / 1e9);
        }
    }
}
