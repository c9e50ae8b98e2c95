//! Generates the internal Raft gRPC service from `proto/gavel/internal/raft.proto`
//! with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = "../../proto";
    let proto_file = "gavel/internal/raft.proto";
    println!("cargo:rerun-if-changed={proto_root}/{proto_file}");

    let file_descriptors = protox::compile([proto_file], [proto_root])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(file_descriptors)?;
    Ok(())
}
