//! What the copier is measured against: reading both trees as `cat` would, and
//! `cp -a`; and the page cache emptied before each case.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};

use crate::tree::each_entry;

/// Writes dirty pages out and empties the page cache, so that a case reads from the
/// disk; false where this process may not (not root, or no /proc).
pub fn drop_caches() -> bool {
    sync().is_ok() && fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Writes every dirty page to the disk (`sync`).
pub fn sync() -> Result<()> {
    let status = Command::new("sync").status()?;
    ensure!(status.success(), "sync: {status}");
    Ok(())
}

/// How long `work` took, and what it gave.
pub fn timed<T>(work: impl FnOnce() -> Result<T>) -> Result<(Duration, T)> {
    let began = Instant::now();
    let out = work()?;
    Ok((began.elapsed(), out))
}

/// Reads every byte of every regular file under each of `roots`, one file after the
/// other on one thread, each inode once; how many bytes that was.
pub fn read_all(roots: &[&Path]) -> Result<u64> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut seen = HashSet::new();
    let mut total = 0;
    for root in roots {
        each_entry(root, |rel, meta| {
            if meta.is_file() && seen.insert((meta.dev(), meta.ino())) {
                total += read_file(&root.join(rel), &mut buf)?;
            }
            Ok(())
        })?;
    }
    Ok(total)
}

fn read_file(path: &Path, buf: &mut [u8]) -> Result<u64> {
    let mut file = File::open(path)?;
    let mut read = 0;
    loop {
        match file.read(buf)? {
            0 => return Ok(read),
            n => read += n as u64,
        }
    }
}

/// `cp -a from to`: `to` made as a copy of `from` with its metadata and links.
pub fn cp_a(from: &Path, to: &Path) -> Result<()> {
    let status = Command::new("cp").arg("-a").arg(from).arg(to).status()?;
    ensure!(
        status.success(),
        "cp -a {} {}: {status}",
        from.display(),
        to.display()
    );
    Ok(())
}

/// How many entries are under `root` (not counting it), each file, link and
/// directory: what a clear of it deletes.
pub fn count_entries(root: &Path) -> Result<u64> {
    let mut count = 0;
    each_entry(root, |_, _| {
        count += 1;
        Ok(())
    })?;
    Ok(count)
}
