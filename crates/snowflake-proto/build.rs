//! Compiles `proto/snowflake/v1/snowflake.proto` with `protox` (pure Rust: no `protoc` needed)
//! into tonic server and client code, and writes the encoded `FileDescriptorSet` next to it for
//! server reflection.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest_dir.join("../../proto").canonicalize()?;
    let proto = proto_root.join("snowflake/v1/snowflake.proto");
    println!("cargo:rerun-if-changed={}", proto.display());

    let mut compiler = protox::Compiler::new([&proto_root])?;
    compiler.include_source_info(true).include_imports(true);
    compiler.open_file(&proto)?;

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("snowflake_v1_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
