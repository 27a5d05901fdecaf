//! refill: data-only, in-place restore of Kubernetes PVCs from Velero file-system backups.

pub mod api;
pub mod claims;
pub mod cli;
pub mod connect;
pub mod controller;
pub mod crds;
pub mod labels;
pub mod mounts;
pub mod observe;
pub mod plan;
pub mod validate;
