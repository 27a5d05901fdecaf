//! The tree the copier is measured on, made the same on every run from a seed: a few
//! large files, many small ones in nested directories, a few symlinks and hard links;
//! and the changes a live volume may have drifted by since its backup.

use std::fs::{self, File, FileTimes};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

const MIB: u64 = 1024 * 1024;

/// A pseudo-random sequence (splitmix64): the same tree from the same seed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    /// A size from `low` to `high` bytes, small ones as likely as large ones on a
    /// logarithmic scale, as file sizes tend to be.
    fn size(&mut self, low: u64, high: u64) -> u64 {
        let (a, b) = ((low as f64).ln(), (high as f64).ln());
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (a + (b - a) * unit).exp() as u64
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// What a made tree holds.
#[derive(Debug, Default)]
pub struct Made {
    /// Bytes of its regular files, each inode once.
    pub bytes: u64,
    pub large: usize,
    pub small: usize,
    pub dirs: usize,
    pub symlinks: usize,
    pub hard_links: usize,
}

/// Makes the tree at `root` (which must not exist): about `total` bytes, half in
/// files of 32-128 MiB, half in files of 4 KiB-1 MiB, 32 to a directory, two levels
/// deep; 16 symlinks and 16 second names of small files.
pub fn make(root: &Path, total: u64) -> Result<Made> {
    let mut random = Random(0x5eed);
    let mut made = Made::default();
    fs::create_dir_all(root.join("large"))?;
    while made.bytes < total / 2 {
        let size = random
            .between(32 * MIB, 128 * MIB)
            .min(total / 2 - made.bytes)
            .max(32 * MIB);
        let path = root.join(format!("large/file-{}.bin", made.large));
        write_random(&path, size, &mut random)?;
        made.bytes += size;
        made.large += 1;
    }
    let mut small = Vec::new();
    while made.bytes < total {
        let i = made.small;
        let dir = root.join(format!("data/d{:02}/e{:02}", i / 1024, i / 32 % 32));
        if i % 32 == 0 {
            fs::create_dir_all(&dir)?;
        }
        let size = random.size(4 * 1024, MIB).min(total - made.bytes).max(1);
        let path = dir.join(format!("file-{i:05}.dat"));
        write_random(&path, size, &mut random)?;
        made.bytes += size;
        made.small += 1;
        small.push(path);
    }
    links(root, &small, &mut made)?;
    each_entry(root, |_, meta| {
        made.dirs += usize::from(meta.is_dir());
        Ok(())
    })?;
    Ok(made)
}

/// 16 symlinks and 16 hard links to small files spread over the tree.
fn links(root: &Path, small: &[PathBuf], made: &mut Made) -> Result<()> {
    fs::create_dir_all(root.join("links"))?;
    let step = (small.len() / 16).max(1);
    for (n, target) in small.iter().step_by(step).take(16).enumerate() {
        let relative = Path::new("..").join(target.strip_prefix(root)?);
        symlink(&relative, root.join(format!("links/symlink-{n}")))?;
        fs::hard_link(target, root.join(format!("links/hard-{n}")))?;
        made.symlinks += 1;
        made.hard_links += 1;
    }
    Ok(())
}

fn write_random(path: &Path, size: u64, random: &mut Random) -> Result<()> {
    let mut out = BufWriter::with_capacity(MIB as usize, File::create(path)?);
    let mut buf = vec![0u8; MIB as usize];
    let mut left = size;
    while left > 0 {
        let n = left.min(MIB) as usize;
        random.fill(&mut buf[..n]);
        out.write_all(&buf[..n])?;
        left -= n as u64;
    }
    out.into_inner()?.sync_all()?;
    Ok(())
}

/// Calls `visit` with every entry under `root` (not `root` itself), by path relative
/// to it, and its metadata (a symlink's own), parents before their children.
pub fn each_entry(
    root: &Path,
    mut visit: impl FnMut(&Path, &fs::Metadata) -> Result<()>,
) -> Result<()> {
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        for entry in fs::read_dir(root.join(&rel))? {
            let child = rel.join(entry?.file_name());
            let meta = fs::symlink_metadata(root.join(&child))?;
            visit(&child, &meta)?;
            if meta.is_dir() {
                pending.push(child);
            }
        }
    }
    Ok(())
}

/// The regular files of one link under `root`, by path relative to it, in order.
pub fn single_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    each_entry(root, |rel, meta| {
        if meta.is_file() && meta.nlink() == 1 {
            files.push(rel.to_path_buf());
        }
        Ok(())
    })?;
    files.sort();
    Ok(files)
}

/// How a live tree drifted: what a copy must write and delete to mend it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Drift {
    /// Files whose size and time changed (any compare finds them).
    pub touched: u64,
    /// Files changed in place, keeping their size and modification time (only a
    /// compare of contents finds them).
    pub rotted: u64,
    /// Entries the snapshot lacks: files, and a directory with its files.
    pub extra: u64,
}

/// Changes 1% of the single-link files of `live` (every hundredth in path order), half
/// in place keeping size and time, half grown by a byte; and adds as many extra files
/// and a directory of 10. `source` is the snapshot `live` is a copy of. Made the same
/// whatever the live tree's state, so that it can be done again after a copy mended it.
pub fn drift(source: &Path, live: &Path) -> Result<Drift> {
    let files = single_files(source)?;
    let mut drift = Drift::default();
    for (n, rel) in files.iter().step_by(100).enumerate() {
        let path = live.join(rel);
        if n % 2 == 0 {
            rot(&source.join(rel), &path)?;
            drift.rotted += 1;
        } else {
            let mut content = fs::read(source.join(rel))?;
            content.push(b'!');
            fs::write(&path, content)?;
            drift.touched += 1;
        }
    }
    let extras = (files.len() / 100).max(1);
    for n in 0..extras {
        let dir = files[n * files.len() / extras]
            .parent()
            .unwrap_or(Path::new(""));
        fs::write(live.join(dir).join(format!("extra-{n}.tmp")), [b'x'; 4096])?;
    }
    let extra_dir = live.join("data/extra-dir");
    fs::create_dir_all(&extra_dir)?;
    for n in 0..10 {
        fs::write(extra_dir.join(format!("f{n}")), [b'y'; 4096])?;
    }
    drift.extra = extras as u64 + 11;
    Ok(drift)
}

/// Writes at `path` the snapshot's file `source` with its first bytes inverted, and
/// gives it the snapshot's modification time, as a disk error could leave it.
fn rot(source: &Path, path: &Path) -> Result<()> {
    let mut content = fs::read(source).with_context(|| format!("reading {}", source.display()))?;
    for byte in content.iter_mut().take(64) {
        *byte = !*byte;
    }
    fs::write(path, content)?;
    let file = File::options().write(true).open(path)?;
    file.set_times(FileTimes::new().set_modified(fs::metadata(source)?.modified()?))?;
    Ok(())
}
