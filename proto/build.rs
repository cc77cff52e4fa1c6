//! Compiles every `.proto` under `protos/` with protox (pure Rust, no system
//! `protoc`) and generates prost types from the resulting descriptors. The
//! serialized descriptor set is kept too: the conformance test compares it
//! with upstream's descriptors.

use std::path::{Path, PathBuf};
use std::{env, fs};

use prost::Message;
use prost_build::{Service, ServiceGenerator};

fn main() {
    let root = Path::new("protos");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(root, &mut files);
    files.sort();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = match protox::compile(&files, [root]) {
        Ok(fds) => fds,
        Err(e) => panic!("proto/protos does not compile: {e:?}"),
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::write(out.join("descriptor_set.bin"), fds.encode_to_vec()).expect("write descriptor set");

    prost_build::Config::new()
        .enable_type_names()
        .type_name_domain(["."], "type.googleapis.com")
        .include_file("_includes.rs")
        // Maps encode in key order, so equal messages encode to equal bytes:
        // cached resources are compared byte for byte.
        .btree_map(["."])
        .service_generator(Box::new(MethodPaths))
        .compile_fds(fds)
        .expect("prost-build");
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|x| x == "proto") {
            files.push(path);
        }
    }
}

/// Emits, per gRPC service, a module of `:path` constants for its methods:
/// the server routes on these, so a typo in a path is a compile error.
struct MethodPaths;

impl ServiceGenerator for MethodPaths {
    fn generate(&mut self, service: Service, buf: &mut String) {
        let full = format!("{}.{}", service.package, service.proto_name);
        buf.push_str(&format!("/// gRPC method paths of `{full}`.\npub mod {} {{\n", snake(&service.name)));
        for m in &service.methods {
            let kind = match (m.client_streaming, m.server_streaming) {
                (false, false) => "unary",
                (true, true) => "bidirectional streaming",
                (true, false) => "client streaming",
                (false, true) => "server streaming",
            };
            buf.push_str(&format!(
                "    /// `{}` ({kind}): `{}` in, `{}` out.\n    pub const {}: &str = \"/{full}/{}\";\n",
                m.proto_name,
                m.input_proto_type,
                m.output_proto_type,
                snake(&m.name).to_uppercase(),
                m.proto_name,
            ));
        }
        buf.push_str("}\n");
    }
}

fn snake(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
