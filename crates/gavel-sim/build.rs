//! Declares the `tokio_unstable` cfg, which the workspace's
//! `.cargo/config.toml` sets for exact replay, so that the compiler knows it.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tokio_unstable)");
}
