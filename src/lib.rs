//! refill: data-only, in-place restore of Kubernetes PVCs from Velero file-system backups.

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
mod validate;
mod watched;
