//! What runs the controllers rather than deciding a restore: the shared context and
//! watch-fed stores, errors and their retries, panics kept to one object, status
//! writes, reads paced or kept a while, leader election, the probe and metrics server, and work side
//! by side.

pub(crate) mod concurrent;
pub(crate) mod context;
pub(crate) mod error;
pub(crate) mod events;
pub mod health;
pub mod leader;
pub mod metrics;
pub(crate) mod object_writes;
pub(crate) mod pacer;
pub(crate) mod panics;
pub(crate) mod recent;
pub(crate) mod stores;
