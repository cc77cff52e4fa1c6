//! Replays every input kept under `fuzz/regressions/<target>/` (crashes
//! the fuzzers found, once fixed, and interesting seeds) through the same
//! entry points the fuzz targets use.

use std::path::Path;

fn replay(target: &str, f: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions").join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "md") {
            continue;
        }
        f(&std::fs::read(&path).unwrap());
        n += 1;
    }
    n
}

#[test]
fn frame_decoder() {
    assert!(replay("frame_decoder", istiod_xds::fuzzing::frame_decoder) > 0);
}

#[test]
fn hpack_decoder() {
    assert!(replay("hpack_decoder", istiod_xds::fuzzing::hpack_decoder) > 0);
}

#[test]
fn connection() {
    assert!(replay("connection", istiod_xds::fuzzing::connection) > 0);
}

#[test]
fn grpc() {
    assert!(replay("grpc", istiod_xds::fuzzing::grpc) > 0);
}
