//! Throughput of `dot_prod` (the encode kernel) for every kernel this CPU runs, hot cache, one
//! thread, in GB/s of data (k · chunk_bytes per call), beside a plain k-input XOR pass over the
//! same inputs (the memory roofline: one load per input byte, nothing computed).
//!
//! ```text
//! cargo run --release -p inec-gf --example kernel_speed [-- SECONDS_PER_CELL [KERNEL...]]
//! ```
//!
//! With kernel names (`avx2`, `gfni256`, ...), only those run. `CHUNKS=4096,65536` sets the
//! chunk sizes; `STAGGER=1` places the inputs at different addresses modulo 4 KiB (separately
//! allocated buffers of a page or more usually share their offset within a page, so all
//! inputs map to the same L1 cache sets — which costs any kernel of this loop structure a
//! good part of its speed at 128 KiB).

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
    let shapes = [(6, 3), (10, 3), (10, 4), (12, 3), (12, 4), (20, 4)];
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
            // A Cauchy-like matrix with no 0 or 1: every product is a real multiplication.
            let coeffs: Vec<u8> = (0..k * m).map(|_| rng.gen_range(2..=255)).collect();
            let matrix = Matrix::new(m, k, &coeffs);
            let stagger = std::env::var("STAGGER").is_ok();
            let skew = |j: usize| if stagger { 64 * ((7 * j) % 64) } else { 0 };
            let inputs: Vec<Vec<u8>> = (0..k)
                .map(|j| (0..chunk_bytes + skew(j)).map(|_| rng.gen()).collect())
                .collect();
            let ins: Vec<&[u8]> = inputs
                .iter()
                .enumerate()
                .map(|(j, v)| &v[skew(j)..])
                .collect();
            let mut outputs = vec![vec![0u8; chunk_bytes]; m];
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
                assert_eq!(outputs, expected, "{} is wrong", kernel.name());
                let mut outs: Vec<&mut [u8]> = outputs.iter_mut().map(|v| &mut v[..]).collect();
                let rate = best_rate(budget, || {
                    kernel.dot_prod(&matrix, black_box(&ins), &mut outs);
                    black_box(&mut outs);
                });
                print!(" {:>9.2}", rate * data_bytes / 1e9);
            }
            // The roofline: one output, the XOR of the k inputs, by the best kernel.
            let ones = Matrix::new(1, k, &vec![1u8; k]);
            let mut xor_out = vec![0u8; chunk_bytes];
            let best = Kernel::best();
            let rate = best_rate(budget, || {
                best.dot_prod(&ones, black_box(&ins), &mut [&mut xor_out[..]]);
                black_box(&mut xor_out);
            });
            println!(" {:>9.2}", rate * data_bytes / 1e9);
        }
    }
}
