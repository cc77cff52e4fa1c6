//! EnvoyFilter, as istiod applies it (`pilot/pkg/networking/core/
//! envoyfilter`): the patches of the filters that select a proxy, applied
//! in istiod's order to the listeners, route configurations and clusters
//! built for it, over dynamic messages of the complete Envoy API
//! ([`schema`]), merged as istiod merges ([`merge`]).

pub mod canonical;
pub mod cluster;
mod fields;
pub mod filters;
pub mod fuzzing;
pub mod listener;
pub mod merge;
pub mod route;
pub mod schema;
pub mod spec;
pub mod status;
