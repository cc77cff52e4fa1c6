//! The binary-level tests, as modules of one test binary: each file under
//! `tests/` is one area (the CA, the webhooks, gateways, hostile inputs,
//! ...). One binary links once where thirteen linked each time a crate
//! changed (docs/architecture.md, "Crates": build times).

mod ambient;
mod ca;
mod cli;
mod deploy;
mod discovery;
mod envoyfilter;
mod extensions;
mod gateway;
mod golden;
mod grpc_xds;
mod hostile;
mod hostile_second;
mod inject;
mod jwks;
mod loadgen;
mod multicluster;
mod operations;
mod served;
mod simulation;
mod vms;
mod waypoint;
mod webhook;
mod whatif;

// What several areas share, loaded once.
#[path = "../xds/tests/support/ads_client.rs"]
mod ads_client;
#[path = "support/issuer.rs"]
mod issuer;
#[path = "../proto/tests/support/python.rs"]
mod python;
#[path = "support/server.rs"]
mod server;
#[path = "support/simulation.rs"]
mod simulation_support;
#[path = "support/webhook_client.rs"]
mod webhook_client;
