//! What the I-JSON number check costs `canonicalize` (not a test: STYLE keeps
//! timing claims in benchmarks).
//!
//! Canonicalizes documents of about 60 KB (just under `INPUT_BYTES_MAX`),
//! each an array of objects whose values are all of one kind, and prints the
//! median of nine repetitions in MB/s and in nanoseconds per number:
//!
//! - `small integers`: up to 6 digits, the check's fast path;
//! - `safe integers`: 16 digits, near 2^53, fully checked;
//! - `decimals`: `1234.5678`-like, fully checked (formatted once more and
//!   compared with the literal);
//! - `exponents`: `1.5e300`- and `1.5e-7`-like, fully checked;
//! - `strings`: no numbers, for comparison.
//!
//! Run with `cargo bench -p gavel-json --bench numbers`.

use std::time::Instant;

/// Repetitions per document; the median is printed.
const REPETITIONS: usize = 9;
/// Canonicalizations per repetition.
const ROUNDS: usize = 50;
/// Values in a document.
const VALUES: usize = 4_000;

/// A document of `VALUES` members written by `value(index)`, and how many numbers it holds.
fn document(value: impl Fn(usize) -> String, numbers_per_value: usize) -> (String, usize) {
    let members: Vec<String> = (0..VALUES).map(|index| format!(r#"{{"k":{}}}"#, value(index))).collect();
    (format!("[{}]", members.join(",")), VALUES * numbers_per_value)
}

fn main() {
    let documents = [
        ("small integers", document(|index| (index * 37 % 1_000_000).to_string(), 1)),
        ("safe integers", document(|index| (9_007_199_254_740_991 - index as u64 * 7919).to_string(), 1)),
        ("decimals", document(|index| format!("{}.{:04}", index * 13 % 100_000, index % 10_000 + 1), 1)),
        // Exponents from 21 on or negative: between, the value could be an
        // integer beyond 2^53 - 1 written as digits, which is refused.
        (
            "exponents",
            document(
                |index| {
                    format!(
                        "{}.5e{}",
                        index % 9 + 1,
                        if index % 2 == 0 { 21 + index % 280 } else { index % 300 } as i64
                            * if index % 2 == 0 { 1 } else { -1 }
                    )
                },
                1,
            ),
        ),
        ("strings", document(|index| format!(r#""value-{index:08}""#), 0)),
    ];
    for (name, (text, numbers)) in &documents {
        assert!(gavel_json::canonicalize(text).is_ok(), "{name} is valid I-JSON");
        let mut seconds: Vec<f64> = (0..REPETITIONS)
            .map(|_| {
                let started = Instant::now();
                for _ in 0..ROUNDS {
                    std::hint::black_box(gavel_json::canonicalize(std::hint::black_box(text)).ok());
                }
                started.elapsed().as_secs_f64() / ROUNDS as f64
            })
            .collect();
        seconds.sort_by(f64::total_cmp);
        let median = seconds[REPETITIONS / 2];
        let megabytes_per_second = text.len() as f64 / median / 1e6;
        let per_number =
            if *numbers > 0 { format!("{:.0} ns per number", median * 1e9 / *numbers as f64) } else { "-".to_string() };
        println!(
            "{name:>15}: {} bytes, {megabytes_per_second:.0} MB/s, {per_number} (median of {REPETITIONS}, min {:.0} MB/s, max {:.0} MB/s)",
            text.len(),
            text.len() as f64 / seconds[REPETITIONS - 1] / 1e6,
            text.len() as f64 / seconds[0] / 1e6,
        );
    }
}
