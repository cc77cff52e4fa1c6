//! Simulated Envoys for load and convergence measurements: meshes, churn, runs and their reports.
//!
//! `loadgen` plays thousands of simulated Envoys (one ADS stream each,
//! delta or state of the world) against a running `pilot-discovery` while
//! it changes the mesh, and reports how fast every proxy converged (issue
//! #7). [`scenario`]: the shapes (presets in `bench/testdata/`); [`mesh`]:
//! a scenario's mesh as a config directory; [`proxy`]: one simulated
//! sidecar; [`churn`]: edits to the mesh, stamped; [`run`]: a whole run;
//! [`stats`]: what it measures and the report; [`wire`]: responses read
//! as they stream in, without copying their resources; [`lean`]: the lean
//! HTTP/2 client of plaintext runs; [`ztunnel`]: simulated ztunnels
//! (ambient's workload API) and their pod churn; [`multicluster`]: a mesh
//! of several clusters on fake API servers, and remote endpoint churn.
#![forbid(unsafe_code)]

pub mod churn;
pub mod csr;
pub mod lean;
pub mod mesh;
pub mod multicluster;
pub mod proxy;
pub mod run;
pub mod scenario;
pub mod stats;
pub mod vms;
pub mod wire;
pub mod ztunnel;
