//! Declares the `tokio_unstable` cfg, which a build for exact replay sets
//! (`RUSTFLAGS="--cfg tokio_unstable"`), so that the compiler knows it.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tokio_unstable)");
}
