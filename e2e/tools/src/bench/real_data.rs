//! The files of the real-data benchmark (`velero-bench`), on this machine's disk:
//! a mixed tree written straight into a claim's local-path directory, the damage a
//! restore repairs, and the same bytes copied and read with no Kubernetes at all
//! (the physical limit a restore is measured against).

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

/// Velero's folder in a volume: neither the backup's nor the app's.
const VELERO_DIR: &str = ".velero";
const MIB: u64 = 1 << 20;

/// What a tree holds: regular files and their bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct Size {
    pub files: u64,
    pub bytes: u64,
}

impl std::ops::AddAssign for Size {
    fn add_assign(&mut self, other: Size) {
        self.files += other.files;
        self.bytes += other.bytes;
    }
}

/// Writes `len` bytes nothing compresses or deduplicates (kopia does both) at the
/// current position of `file`.
fn fill(file: &mut File, len: u64) -> Result<()> {
    let mut random = File::open("/dev/urandom")?.take(len);
    let copied = std::io::copy(&mut random, file)?;
    ensure!(copied == len, "/dev/urandom gave {copied} of {len} bytes");
    Ok(())
}

fn new_file(path: &Path, len: u64, mode: u32, owner: u32) -> Result<()> {
    fs::create_dir_all(path.parent().context("a file has a parent")?)?;
    let mut file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    fill(&mut file, len)?;
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    std::os::unix::fs::chown(path, Some(owner), Some(owner))?;
    Ok(())
}

/// An app's volume of about `mib` MiB as data sets are: half of it in a few large
/// files (64 MiB at most), 30% in 1 MiB files, 20% in many small ones of 2 to 62
/// KiB, spread over directories, some files owned by another user and mode.
pub fn write_mixed_tree(dir: &Path, mib: u64) -> Result<Size> {
    let total = mib * MIB;
    let mut size = Size::default();
    let mut add = |path: PathBuf, len: u64, mode: u32, owner: u32| -> Result<()> {
        new_file(&path, len, mode, owner)?;
        size += Size {
            files: 1,
            bytes: len,
        };
        Ok(())
    };
    let large = total / 2;
    let count = large.div_ceil(64 * MIB).max(1);
    for i in 0..count {
        add(
            dir.join(format!("large/blob-{i:02}.bin")),
            large / count,
            0o600,
            1000,
        )?;
    }
    let medium = (total * 3 / 10 / MIB).max(1);
    for i in 0..medium {
        add(
            dir.join(format!("medium/{:03}/part-{i:04}.dat", i / 50)),
            MIB,
            0o640,
            1000,
        )?;
    }
    // Small files of 2..62 KiB, sizes from a fixed sequence (the same tree each run).
    let mut left = total / 5;
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut i = 0u64;
    while left > 0 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = ((2 + state % 61) * 1024).min(left);
        add(
            dir.join(format!("small/{:03}/note-{i:05}.txt", i / 200)),
            len,
            0o644,
            0,
        )?;
        left -= len;
        i += 1;
    }
    std::os::unix::fs::symlink("large/blob-00.bin", dir.join("current"))?;
    Ok(size)
}

/// How much of the volumes the damage before a restore changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// Every 100th file in path order rewritten with new bytes (size kept).
    OnePercent,
    /// Every file rewritten with new bytes (size kept).
    All,
}

impl Damage {
    pub fn label(self) -> &'static str {
        match self {
            Damage::OnePercent => "1% of files changed",
            Damage::All => "every file changed",
        }
    }
}

/// Files added to each volume after the backup, as an app goes on writing: a
/// restore that leaves the volume as the backup holds it removes them.
const ADDED_FILES: u64 = 2;
const ADDED_SIZE: u64 = 256 * 1024;

/// Damages the volumes under `dirs` as `damage` says, plus [`ADDED_FILES`] new files
/// in each. Returns what was rewritten and added.
pub fn damage(dirs: &[PathBuf], damage: Damage) -> Result<Size> {
    let mut files = Vec::new();
    for dir in dirs {
        regular_files(dir, dir, &mut files)?;
    }
    files.sort();
    let mut changed = Size::default();
    for (i, (path, len)) in files.iter().enumerate() {
        if damage == Damage::All || i % 100 == 0 {
            let mut file = fs::OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?;
            file.seek(SeekFrom::Start(0))?;
            fill(&mut file, *len)?;
            changed += Size {
                files: 1,
                bytes: *len,
            };
        }
    }
    for dir in dirs {
        for i in 0..ADDED_FILES {
            let path = dir.join(format!("added-after-backup-{i}.bin"));
            new_file(&path, ADDED_SIZE, 0o644, 0)?;
            changed += Size {
                files: 1,
                bytes: ADDED_SIZE,
            };
        }
    }
    Ok(changed)
}

/// Every regular file under `dir` with its size, Velero's folder at the root aside.
fn regular_files(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, u64)>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let path = entry.path();
        if dir == root && entry.file_name() == VELERO_DIR {
            continue;
        }
        let meta = fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            regular_files(root, &path, out)?;
        } else if meta.is_file() {
            out.push((path, meta.len()));
        }
    }
    Ok(())
}

/// `cp -a` of each of `dirs` into `into` (made empty first), then `sync`: writing
/// the same bytes on the same disk with no Kubernetes. Returns the time taken.
pub fn copy_trees(dirs: &[(String, PathBuf)], into: &Path) -> Result<Duration> {
    if into.exists() {
        fs::remove_dir_all(into)?;
    }
    fs::create_dir_all(into)?;
    let began = Instant::now();
    for (name, dir) in dirs {
        run(std::process::Command::new("cp")
            .arg("-a")
            .arg(dir)
            .arg(into.join(name)))?;
    }
    run(&mut std::process::Command::new("sync"))?;
    Ok(began.elapsed())
}

fn run(command: &mut std::process::Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {command:?}"))?;
    ensure!(status.success(), "{command:?} failed ({status})");
    Ok(())
}

/// Reads `want` and `have` side by side as refill's copier compares them (every
/// entry's type, mode and owner, a symlink's target, a file's bytes), and fails
/// naming the first differences, an entry only one side holds included (Velero's
/// folder at `have`'s root aside). Returns the bytes read from each side.
pub fn compare_trees(want: &Path, have: &Path) -> Result<u64> {
    let mut diffs = Vec::new();
    let mut bytes = 0;
    compare_dir(want, have, true, &mut bytes, &mut diffs)?;
    if !diffs.is_empty() {
        let shown = diffs.len().min(10);
        bail!(
            "{} differs from {} in {} entries, first: {}",
            have.display(),
            want.display(),
            diffs.len(),
            diffs[..shown].join("; ")
        );
    }
    Ok(bytes)
}

fn names(dir: &Path, root: bool) -> Result<std::collections::BTreeSet<std::ffi::OsString>> {
    let mut out = std::collections::BTreeSet::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let name = entry?.file_name();
        if !(root && name == VELERO_DIR) {
            out.insert(name);
        }
    }
    Ok(out)
}

fn compare_dir(
    want: &Path,
    have: &Path,
    root: bool,
    bytes: &mut u64,
    diffs: &mut Vec<String>,
) -> Result<()> {
    let (wanted, had) = (names(want, root)?, names(have, root)?);
    for name in had.difference(&wanted) {
        diffs.push(format!("{}: not in the backup", have.join(name).display()));
    }
    for name in &wanted {
        let (w, h) = (want.join(name), have.join(name));
        if !had.contains(name) {
            diffs.push(format!("{}: missing", h.display()));
            continue;
        }
        let (wm, hm) = (fs::symlink_metadata(&w)?, fs::symlink_metadata(&h)?);
        if (wm.mode(), wm.uid(), wm.gid()) != (hm.mode(), hm.uid(), hm.gid()) {
            diffs.push(format!(
                "{}: mode/owner {:o} {}:{}, want {:o} {}:{}",
                h.display(),
                hm.mode(),
                hm.uid(),
                hm.gid(),
                wm.mode(),
                wm.uid(),
                wm.gid()
            ));
        } else if wm.is_dir() {
            compare_dir(&w, &h, false, bytes, diffs)?;
        } else if wm.file_type().is_symlink() {
            if fs::read_link(&w)? != fs::read_link(&h)? {
                diffs.push(format!("{}: another target", h.display()));
            }
        } else if wm.is_file() {
            *bytes += wm.len();
            if !same_bytes(&w, &h)? {
                diffs.push(format!("{}: other bytes", h.display()));
            }
        }
    }
    Ok(())
}

/// What the copier reads of each file at once.
const CHUNK: usize = 256 * 1024;

fn same_bytes(a: &Path, b: &Path) -> Result<bool> {
    let (mut a, mut b) = (File::open(a)?, File::open(b)?);
    let (mut x, mut y) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    loop {
        let n = read_full(&mut a, &mut x)?;
        let m = read_full(&mut b, &mut y)?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// Reads until `buf` is full or the file ends.
fn read_full(file: &mut File, buf: &mut [u8]) -> Result<usize> {
    let mut at = 0;
    while at < buf.len() {
        match file.read(&mut buf[at..])? {
            0 => break,
            n => at += n,
        }
    }
    Ok(at)
}

/// The size of the trees under `dirs` (regular files), Velero's folder aside.
pub fn size_of(dirs: &[PathBuf]) -> Result<Size> {
    let mut files = Vec::new();
    for dir in dirs {
        regular_files(dir, dir, &mut files)?;
    }
    Ok(Size {
        files: files.len() as u64,
        bytes: files.iter().map(|(_, len)| len).sum(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_tree_differs_and_its_copy_does_not() {
        let base = std::env::temp_dir().join(format!("real-data-{}", std::process::id()));
        let tree = base.join("tree");
        let written = write_mixed_tree(&tree, 2).unwrap();
        assert!(written.files > 10, "{written:?}");
        assert_eq!(
            size_of(std::slice::from_ref(&tree)).unwrap().bytes,
            written.bytes
        );
        copy_trees(&[("copy".into(), tree.clone())], &base.join("copies")).unwrap();
        let copy = base.join("copies/copy");
        assert_eq!(compare_trees(&tree, &copy).unwrap(), written.bytes);
        let changed = damage(std::slice::from_ref(&copy), Damage::OnePercent).unwrap();
        assert_eq!(
            changed.files,
            written.files.div_ceil(100) + ADDED_FILES,
            "{changed:?}"
        );
        let err = compare_trees(&tree, &copy).unwrap_err().to_string();
        assert!(
            err.contains("not in the backup") && err.contains("other bytes"),
            "{err}"
        );
        fs::remove_dir_all(&base).unwrap();
    }
}
