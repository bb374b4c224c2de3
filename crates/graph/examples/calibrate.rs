//! Measures this machine's XOR and multiply-accumulate rates with the process-wide `gf`
//! kernel and prints a calibration file for the α-β model and the simulator.
//!
//! ```text
//! cargo run --release -p inec-graph --example calibrate > crates/graph/calibration/default.json
//! ```
//!
//! The network constants are not measured here: they describe a nominal 10 Gb/s TCP cluster
//! (bandwidth, one-way latency, per-message cost) and can be overridden with flags.

use std::time::Instant;

fn rate(mut op: impl FnMut()) -> f64 {
    const BYTES: usize = 1 << 20;
    let mut best = f64::INFINITY;
    for _ in 0..9 {
        let start = Instant::now();
        for _ in 0..64 {
            op();
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    (64 * BYTES) as f64 / best / 1e9
}

fn main() {
    let kernel = gf::kernel();
    let src: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; 1 << 20];
    let xor = rate(|| kernel.xor(&src, &mut dst));
    let mul_add = rate(|| kernel.mul_add(0x8e, &src, &mut dst));
    let cal = graph::model::Calibration {
        description: format!(
            "compute rates measured with `cargo run --release -p inec-graph --example calibrate` \
             (best of 9 runs of 64 passes over 1 MiB, kernel {}); network constants are a \
             nominal 10 Gb/s TCP cluster, not measured",
            kernel.name()
        ),
        kernel: kernel.name().to_string(),
        bandwidth_gbit_s: 10.0,
        latency_us: 10.0,
        message_overhead_us: 2.0,
        xor_gbyte_s: (xor * 10.0).round() / 10.0,
        mul_add_gbyte_s: (mul_add * 10.0).round() / 10.0,
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&cal).expect("a calibration serializes")
    );
}
