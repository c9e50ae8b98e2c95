//! The Raft log's cost, two measurements in one program: `fsync` (what
//! durability costs an append and a replicated write) and `append` (a
//! durable append's latency and appends per second). One program, because
//! `cargo test` builds every example and each links its own copy of
//! openraft's generic code (about 46 s of compiling each, 2026-12-07).
//!
//! `cargo run --release -p gavel-raft --example log_cost -- fsync [DIR] [RUNS]`
//! `cargo run --release -p gavel-raft --example log_cost -- append [DIR] [APPENDS] [SECONDS]`

mod append;
mod common;
mod fsync;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("fsync") => fsync::run(args).await,
        Some("append") => append::run(args).await,
        _ => {
            eprintln!("usage: log_cost fsync [DIR] [RUNS] | log_cost append [DIR] [APPENDS] [SECONDS]");
            std::process::exit(2);
        }
    }
}
