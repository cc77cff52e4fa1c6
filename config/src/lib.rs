//! The configuration objects the control plane reads, typed and validated: Kubernetes' own kinds, Istio's CRDs, the Gateway API, and the manifests they are written in; no I/O.
//!
//! Istio calls these "config" (istiod's `pkg/config`): what a source, the
//! API server or `--configDir`, hands over as text becomes typed objects
//! here, checked as istiod's validation webhook checks them.
//!
//! - [`manifest`]: YAML or JSON documents -> [`manifest::Object`]s, with
//!   located errors; [`yaml`] bounds what the YAML parser is given;
//! - [`objects`]: the Kubernetes kinds read (Services, EndpointSlices,
//!   Pods, Nodes, Namespaces, Secrets) and the [`objects::Objects`] a
//!   source holds; [`meta`]: what every object has;
//! - [`istio`]: the Istio CRD specs, parsed and validated
//!   ([`istio::validate`], Go's regexp rules in [`istio::re2`]);
//!   [`gateway_api`]: the Gateway API kinds, and [`gateway_convert`]: them
//!   as the Istio Gateways and VirtualServices istiod makes of them;
//!   [`duration`]: Go durations;
//! - [`meshconfig`]: the mesh configuration's settings; [`networks`]: the
//!   mesh networks and where an endpoint sits in them;
//! - conversions that read only configuration: [`ingress`] (Kubernetes
//!   Ingresses as istiod's Gateways and VirtualServices), [`delegate`]
//!   (delegate VirtualServices merged), [`credentials`] (what a
//!   credential Secret or ConfigMap holds).
#![forbid(unsafe_code)]

pub mod backend_tls;
pub mod credentials;
pub mod delegate;
pub mod duration;
pub mod extensions;
pub mod gateway_api;
pub mod gateway_convert;
pub mod gateway_merge;
pub mod ingress;
pub mod istio;
pub mod manifest;
pub mod meshconfig;
pub mod meta;
pub mod networks;
pub mod objects;
pub mod workload;
pub mod yaml;
