//! `loadgen`: plays thousands of simulated Envoys (one ADS stream each)
//! against a running `pilot-discovery` while it changes the mesh, and
//! reports how fast every proxy converged (issue #7). What exists so far:
//! the scenarios ([`scenario`], presets in `bench/testdata/`) and
//! `loadgen mesh`, which writes a scenario's mesh as a config directory
//! ([`mesh`]). The simulated proxies (`loadgen run`) are not written yet.
#![forbid(unsafe_code)]

pub mod mesh;
pub mod scenario;
