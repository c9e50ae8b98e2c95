//! Generates the Rust code of the `gavel.v1` gRPC API from `proto/gavel/v1`.
//!
//! protox is a protobuf compiler written in Rust, so building this crate needs
//! no system `protoc`. The compiled descriptor set is also written to
//! `$OUT_DIR/gavel_descriptor.bin` for gRPC server reflection.

use std::{env, error::Error, fs, path::PathBuf};

use protox::prost::Message as _;

/// Every file of the API, relative to the proto root (as they import each other).
const PROTO_FILES: &[&str] = &[
    "gavel/v1/common.proto",
    "gavel/v1/error.proto",
    "gavel/v1/approval.proto",
    "gavel/v1/capability.proto",
    "gavel/v1/execution.proto",
    "gavel/v1/worker.proto",
    "gavel/v1/audit.proto",
    "gavel/v1/cluster.proto",
    "gavel/v1/access.proto",
    "gavel/v1/policy.proto",
];

fn main() -> Result<(), Box<dyn Error>> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest_dir.join("../../proto");
    // Only the public API's directory: other protos under proto/ belong to
    // other crates and must not rebuild this one.
    println!("cargo:rerun-if-changed={}", proto_root.join("gavel/v1").display());
    println!("cargo:rerun-if-changed=build.rs");

    // protox keeps the comments (source info), so the generated types carry
    // the proto documentation and reflection clients can show it.
    let descriptor_set = protox::compile(PROTO_FILES, [&proto_root])?;

    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out_dir.join("gavel_descriptor.bin"), descriptor_set.encode_to_vec())?;

    // Maps (attributes) are BTreeMaps: ordered like the core's, so converting
    // is a copy and an encoded message has one byte form.
    tonic_prost_build::configure().build_server(true).build_client(true).btree_map(".").compile_fds(descriptor_set)?;
    Ok(())
}
