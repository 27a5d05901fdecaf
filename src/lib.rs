//! refill: data-only, in-place restore of Kubernetes PVCs from Velero file-system backups.

// What only the crate uses is `pub(crate)`: `pub` is kept for what the binary, the
// integration tests and the e2e crates use.
#![warn(unreachable_pub)]

pub mod api;
mod claims;
pub mod cli;
pub mod connect;
pub mod controller;
pub mod copy;
pub mod crds;
pub mod gitops;
#[cfg(test)]
mod hostile_input;
mod k8s_names;
pub mod labels;
mod mounts;
mod nodes;
mod observe;
mod plan;
mod populator;
mod template_mounts;
mod validate;
mod watched;
