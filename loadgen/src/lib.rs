//! `loadgen`: plays thousands of simulated Envoys (one ADS stream each)
//! against a running `pilot-discovery` while it changes the mesh, and
//! reports how fast every proxy converged (issue #7). What exists so far:
//! the scenarios ([`scenario`], presets in `bench/testdata/`) and
//! `loadgen mesh`, which writes a scenario's mesh as a config directory
//! ([`mesh`]), and the first part of `loadgen run` ([`run`]): SotW
//! sidecars that connect, sync and report their sync times.
#![forbid(unsafe_code)]

pub mod mesh;
pub mod run;
pub mod scenario;
