//! Setups shared by more than one benchmark target. Each target uses a
//! part of them, so the rest is dead code there.
#![allow(dead_code)]

/// The allocator `pilot-discovery` runs on (jemalloc, with its heap
/// sampling as .cargo/config.toml builds it), so that these benches count
/// what the server pays: under glibc's malloc a full rebuild of `large`
/// spent about a quarter of its instructions allocating and freeing.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

pub(crate) mod ca;
pub(crate) mod inject;
pub(crate) mod mesh;
