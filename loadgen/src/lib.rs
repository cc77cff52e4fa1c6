//! `loadgen`: plays thousands of simulated Envoys (one ADS stream each)
//! against a running `pilot-discovery` while it changes the mesh, and
//! reports how fast every proxy converged. Nothing is implemented yet:
//! see issue #7. It decodes xDS with the `istiod-proto` types.
#![forbid(unsafe_code)]
