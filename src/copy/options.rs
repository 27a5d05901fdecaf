//! How a copy runs: whether it deletes what the snapshot lacks, how it tells that a
//! file is already right, and on how many threads.

use std::num::NonZeroUsize;

/// How a copy tells that a live file already is the snapshot's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Compare {
    /// Size, modification time, owner, mode, extended attributes, then every byte of
    /// both files.
    #[default]
    Contents,
    /// Size, modification time (to the nanosecond), owner, mode and extended
    /// attributes only, reading no byte: quicker, but a file corrupted in place that
    /// kept its size and modification time is taken for right and not put back.
    Metadata,
}

/// What a copy does besides putting the chosen entries in place, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Also delete what the live tree has under the chosen paths and the snapshot
    /// does not.
    pub mirror: bool,
    /// How files already right are told.
    pub compare: Compare,
    /// Threads that compare and write regular files (1: one at a time).
    pub threads: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            mirror: false,
            compare: Compare::default(),
            threads: default_threads(std::thread::available_parallelism().ok()),
        }
    }
}

/// Fewer threads than this leave a disk idle while one file is compared.
const MIN_THREADS: usize = 2;
/// More than this only queue on the disk and hold more buffers.
const MAX_THREADS: usize = 16;

/// The threads a copy uses when not told: one per core the machine gives this
/// process (unknown: the fewest), within [`MIN_THREADS`] and [`MAX_THREADS`].
pub fn default_threads(available: Option<NonZeroUsize>) -> usize {
    available
        .map_or(MIN_THREADS, NonZeroUsize::get)
        .clamp(MIN_THREADS, MAX_THREADS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_one_thread_per_core_within_bounds() {
        let cases = [
            (None, 2),
            (Some(1), 2),
            (Some(2), 2),
            (Some(8), 8),
            (Some(64), 16),
        ];
        for (cores, want) in cases {
            let cores = cores.and_then(NonZeroUsize::new);
            assert_eq!(default_threads(cores), want, "{cores:?} cores");
        }
    }
}
