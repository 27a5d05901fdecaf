//! refill's benchmarks and its demo, on the local cluster that `refill_e2e` (the
//! tests' harness) starts and drives:
//!
//! - [`bench`]: refill against a kubectl runbook and two floors on kwok, behind
//!   `e2e/bench/run` (the `bench` binary);
//! - [`velero_bench`]: refill Direct, refill Staged and Velero alone on real data
//!   and real nodes, behind `e2e/bench/velero` (the `velero-bench` binary);
//! - [`demo`]: the one-command demo behind `e2e/demo` (the `demo` binary).
//!
//! `copy-bench` (`refill copy` on one disk) and `request-load` (many teams'
//! requests at once) are binaries of their own. None of this is linked into the
//! tests, which need only the harness.

// As in the harness: these modules are read beside the binaries that run them, and
// their many public items (mostly fields of scenes and results) are public for those
// binaries and for this crate's smoke test rather than for readers of an API.
#![allow(missing_docs)]

pub mod bench;
pub mod demo;
pub mod velero_bench;
