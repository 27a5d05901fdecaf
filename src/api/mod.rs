//! The objects refill reads and writes: its own `refill.dev` kinds and the `velero.io/v1`
//! kinds of a Velero installation.

pub(crate) mod backup_volume;
pub mod bounds;
pub mod data_restore;
pub(crate) mod data_restore_request;
pub(crate) mod data_restore_schedule;
pub mod gitops;
pub mod paths;
pub mod velero;
pub(crate) mod volume_plugin_restore;

pub use backup_volume::*;
pub use data_restore::*;
pub use data_restore_request::*;
pub use data_restore_schedule::*;
pub use gitops::*;
pub use paths::*;
pub use velero::*;
pub use volume_plugin_restore::*;
