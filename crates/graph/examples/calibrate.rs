//! Measures this machine's XOR and multiply-accumulate rates with the process-wide `gf`
//! kernel and prints a calibration file for the α-β model and the simulator.
//!
//! ```text
//! cargo run --release -p inec-graph --example calibrate > crates/graph/calibration/default.json
//! ```
//!
//! This is a longer run of [`graph::model::measure_compute`] than `inec plan --calibrate`
//! (best of 9 runs of 64 passes over 1 MiB). The network constants are not measured here: they
//! describe a nominal 10 Gb/s TCP cluster (bandwidth, one-way latency, per-message cost) and
//! can be overridden with flags.

fn main() {
    let rates = graph::model::measure_compute(1 << 20, 64, 9);
    let cal = graph::model::Calibration {
        description: format!(
            "compute rates measured with `cargo run --release -p inec-graph --example calibrate` \
             ({}); network constants are a nominal 10 Gb/s TCP cluster, not measured",
            rates.method
        ),
        kernel: rates.kernel,
        bandwidth_gbit_s: 10.0,
        latency_us: 10.0,
        message_overhead_us: 2.0,
        xor_gbyte_s: rates.xor_gbyte_s,
        mul_add_gbyte_s: rates.mul_add_gbyte_s,
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&cal).expect("a calibration serializes")
    );
}
