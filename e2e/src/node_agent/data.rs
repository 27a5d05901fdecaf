//! The simulated data path: snapshots are plain directory trees under
//! `<snapshots_dir>/<snapshotID>/`, restored by copying them over the volume's
//! directory the way a kopia restore lays files down (files overwritten, missing
//! directories created, files the snapshot does not have left in place); plus the
//! done files the restore helper waits for.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::decide::{chunk_size, pace};

/// Folder in a volume's root that holds done files.
pub const DONE_DIR: &str = ".velero";

/// Directory of a snapshot, if the ID can name one (a single path component).
pub fn snapshot_dir(snapshots_dir: &Path, snapshot_id: &str) -> Option<PathBuf> {
    let mut components = Path::new(snapshot_id).components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(_)), None) => Some(snapshots_dir.join(snapshot_id)),
        _ => None,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    File(u64),
    Symlink(PathBuf),
}

/// The tree of one snapshot, listed parents first.
#[derive(Clone, Debug)]
pub struct Snapshot {
    root: PathBuf,
    entries: Vec<(PathBuf, Kind)>,
    /// Bytes in its regular files: what progress counts up to.
    pub total_bytes: u64,
}

impl Snapshot {
    /// Lists the tree under `root`. Symbolic links are kept as links, not followed.
    pub fn scan(root: &Path) -> io::Result<Snapshot> {
        if !fs::metadata(root)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not a directory", root.display()),
            ));
        }
        let mut snapshot = Snapshot {
            root: root.to_path_buf(),
            entries: Vec::new(),
            total_bytes: 0,
        };
        snapshot.scan_dir(Path::new(""))?;
        Ok(snapshot)
    }

    fn scan_dir(&mut self, relative: &Path) -> io::Result<()> {
        let mut children: Vec<_> =
            fs::read_dir(self.root.join(relative))?.collect::<io::Result<_>>()?;
        children.sort_by_key(|e| e.file_name());
        for child in children {
            let path = relative.join(child.file_name());
            let meta = fs::symlink_metadata(self.root.join(&path))?;
            if meta.is_dir() {
                self.entries.push((path.clone(), Kind::Dir));
                self.scan_dir(&path)?;
            } else if meta.file_type().is_symlink() {
                let target = fs::read_link(self.root.join(&path))?;
                self.entries.push((path, Kind::Symlink(target)));
            } else if meta.is_file() {
                self.total_bytes += meta.len();
                self.entries.push((path, Kind::File(meta.len())));
            }
        }
        Ok(())
    }

    /// Number of files, directories and links in the snapshot.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// How a restore ended when it did not finish.
#[derive(Debug)]
pub enum CopyError {
    Cancelled,
    Io(anyhow::Error),
}

impl From<anyhow::Error> for CopyError {
    fn from(e: anyhow::Error) -> Self {
        CopyError::Io(e)
    }
}

/// Copies the snapshot into `target` (which must exist), calling `progress` with
/// the bytes copied so far after every piece, and checking `cancelled` as often.
/// With `bytes_per_second`, pauses to keep to that rate. Blocking; returns the
/// bytes copied.
pub fn restore(
    snapshot: &Snapshot,
    target: &Path,
    bytes_per_second: Option<u64>,
    mut progress: impl FnMut(u64),
    cancelled: impl Fn() -> bool,
) -> Result<u64, CopyError> {
    if !fs::metadata(target)
        .with_context(|| format!("volume directory {}", target.display()))?
        .is_dir()
    {
        return Err(CopyError::Io(anyhow::anyhow!(
            "volume path {} is not a directory",
            target.display()
        )));
    }
    let started = Instant::now();
    let mut buffer = vec![0u8; chunk_size(bytes_per_second)];
    let mut done = 0u64;
    let wait = |done: u64| -> Result<(), CopyError> {
        let Some(bps) = bytes_per_second else {
            return Ok(());
        };
        let mut left = pace(done, started.elapsed(), bps);
        while !left.is_zero() {
            if cancelled() {
                return Err(CopyError::Cancelled);
            }
            let step = left.min(Duration::from_millis(20));
            std::thread::sleep(step);
            left -= step;
        }
        Ok(())
    };
    for (relative, kind) in &snapshot.entries {
        if cancelled() {
            return Err(CopyError::Cancelled);
        }
        let source = snapshot.root.join(relative);
        let dest = target.join(relative);
        match kind {
            Kind::Dir => {
                make_dir(&dest)?;
            }
            Kind::Symlink(link) => {
                if fs::symlink_metadata(&dest).is_ok_and(|m| !m.is_dir()) {
                    fs::remove_file(&dest)
                        .with_context(|| format!("replacing {}", dest.display()))?;
                }
                std::os::unix::fs::symlink(link, &dest)
                    .with_context(|| format!("creating link {}", dest.display()))?;
            }
            Kind::File(_) => {
                if fs::symlink_metadata(&dest).is_ok_and(|m| m.file_type().is_symlink()) {
                    fs::remove_file(&dest)
                        .with_context(|| format!("replacing {}", dest.display()))?;
                }
                let mut input = fs::File::open(&source)
                    .with_context(|| format!("reading {}", source.display()))?;
                let mut output = fs::File::create(&dest)
                    .with_context(|| format!("writing {}", dest.display()))?;
                loop {
                    if cancelled() {
                        return Err(CopyError::Cancelled);
                    }
                    let n = input
                        .read(&mut buffer)
                        .with_context(|| format!("reading {}", source.display()))?;
                    if n == 0 {
                        break;
                    }
                    output
                        .write_all(&buffer[..n])
                        .with_context(|| format!("writing {}", dest.display()))?;
                    done += n as u64;
                    progress(done);
                    wait(done)?;
                }
                let permissions = fs::metadata(&source)
                    .with_context(|| format!("reading {}", source.display()))?
                    .permissions();
                fs::set_permissions(&dest, permissions)
                    .with_context(|| format!("setting permissions of {}", dest.display()))?;
            }
        }
    }
    // Directory permissions last, so that a read-only directory is filled first.
    for (relative, kind) in snapshot.entries.iter().rev() {
        if *kind == Kind::Dir {
            let permissions = fs::metadata(snapshot.root.join(relative))
                .context("reading snapshot directory")?
                .permissions();
            let dest = target.join(relative);
            fs::set_permissions(&dest, permissions)
                .with_context(|| format!("setting permissions of {}", dest.display()))?;
        }
    }
    progress(done);
    Ok(done)
}

fn make_dir(dest: &Path) -> Result<()> {
    match fs::symlink_metadata(dest) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => bail!(
            "{} exists and is not a directory, the snapshot has a directory there",
            dest.display()
        ),
        Err(_) => fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display())),
    }
}

/// Writes the done file the restore helper waits for, as Velero's data path does
/// after a restore: removes `<root>/.velero` with whatever earlier restores left
/// in it, then creates `<root>/.velero/<uid>`, empty.
pub fn write_done_file(root: &Path, uid: &str) -> io::Result<PathBuf> {
    remove_done_dir(root)?;
    let dir = root.join(DONE_DIR);
    fs::create_dir_all(&dir)?;
    let file = dir.join(uid);
    fs::write(&file, b"")?;
    Ok(file)
}

/// Whether `<root>/.velero/<uid>` exists.
pub fn done_file_exists(root: &Path, uid: &str) -> bool {
    root.join(DONE_DIR).join(uid).exists()
}

/// Removes `<root>/.velero`, as the restore helper does before it exits.
pub fn remove_done_dir(root: &Path) -> io::Result<()> {
    match fs::remove_dir_all(root.join(DONE_DIR)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Writes a snapshot fixture: `<snapshots_dir>/<snapshot_id>/` holding `files`,
/// each a path relative to the volume's root (`/`-separated, parents created) and
/// its content. A snapshot of that ID written before is replaced, since a
/// snapshot never changes. Returns the snapshot's directory.
pub fn write_snapshot(
    snapshots_dir: &Path,
    snapshot_id: &str,
    files: &[(&str, &[u8])],
) -> Result<PathBuf> {
    let dir = snapshot_dir(snapshots_dir, snapshot_id)
        .with_context(|| format!("{snapshot_id:?} cannot name a snapshot directory"))?;
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (path, content) in files {
        let relative = Path::new(path.trim_start_matches('/'));
        if relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
            || relative.as_os_str().is_empty()
        {
            bail!("{path:?} is not a relative path inside the snapshot");
        }
        let file = dir.join(relative);
        if let Some(parent) = file.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        fs::write(&file, content).with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::os::unix::fs::PermissionsExt;

    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> Self {
            let dir = std::env::temp_dir().join(format!(
                "refill-node-agent-{}",
                uuid::Uuid::new_v4().simple()
            ));
            fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn snapshot_ids_name_one_directory_below_the_snapshots() {
        let base = Path::new("/snaps");
        assert_eq!(snapshot_dir(base, "abc"), Some(PathBuf::from("/snaps/abc")));
        for bad in ["", ".", "..", "a/b", "/abs", "../x"] {
            assert_eq!(snapshot_dir(base, bad), None, "{bad:?}");
        }
    }

    #[test]
    fn restore_overwrites_creates_and_keeps_like_kopia() {
        let scratch = Scratch::new();
        let snapshots = scratch.0.join("snapshots");
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let dir = write_snapshot(
            &snapshots,
            "snap-1",
            &[
                ("top.txt", b"top"),
                ("data/a.txt", b"new a"),
                ("data/deep/b.bin", &big),
                ("empty", b""),
            ],
        )
        .unwrap();
        std::os::unix::fs::symlink("top.txt", dir.join("link")).unwrap();
        fs::set_permissions(dir.join("top.txt"), fs::Permissions::from_mode(0o600)).unwrap();

        let volume = scratch.0.join("volume");
        fs::create_dir_all(volume.join("data")).unwrap();
        fs::write(volume.join("data/a.txt"), b"old content of a, longer").unwrap();
        fs::write(volume.join("keep.txt"), b"kept").unwrap();

        let snapshot = Snapshot::scan(&dir).unwrap();
        assert_eq!(snapshot.total_bytes, 3 + 5 + 300_000);
        let reports = RefCell::new(Vec::new());
        let copied = restore(
            &snapshot,
            &volume,
            None,
            |done| reports.borrow_mut().push(done),
            || false,
        )
        .unwrap();
        assert_eq!(copied, snapshot.total_bytes);

        assert_eq!(fs::read(volume.join("top.txt")).unwrap(), b"top");
        assert_eq!(fs::read(volume.join("data/a.txt")).unwrap(), b"new a");
        assert_eq!(fs::read(volume.join("data/deep/b.bin")).unwrap(), big);
        assert_eq!(fs::read(volume.join("empty")).unwrap(), b"");
        assert_eq!(fs::read(volume.join("keep.txt")).unwrap(), b"kept");
        assert_eq!(
            fs::read_link(volume.join("link")).unwrap(),
            PathBuf::from("top.txt")
        );
        let mode = fs::metadata(volume.join("top.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        let reports = reports.into_inner();
        assert!(reports.windows(2).all(|w| w[0] <= w[1]), "{reports:?}");
        assert_eq!(reports.last(), Some(&snapshot.total_bytes));

        // Restoring again is harmless.
        restore(&snapshot, &volume, None, |_| {}, || false).unwrap();
        assert_eq!(fs::read(volume.join("data/a.txt")).unwrap(), b"new a");
    }

    #[test]
    fn rate_limit_slows_the_copy_and_cancel_stops_it() {
        let scratch = Scratch::new();
        let content = vec![7u8; 40_000];
        let dir = write_snapshot(&scratch.0, "s", &[("f", &content)]).unwrap();
        let snapshot = Snapshot::scan(&dir).unwrap();
        let volume = scratch.0.join("v");
        fs::create_dir_all(&volume).unwrap();

        let started = Instant::now();
        let reports = RefCell::new(0usize);
        restore(
            &snapshot,
            &volume,
            Some(100_000),
            |_| *reports.borrow_mut() += 1,
            || false,
        )
        .unwrap();
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(350), "took {took:?}");
        assert!(*reports.borrow() >= 8, "{} reports", reports.borrow());

        let result = restore(&snapshot, &volume, Some(1_000), |_| {}, || true);
        assert!(matches!(result, Err(CopyError::Cancelled)));
    }

    #[test]
    fn a_missing_snapshot_or_volume_is_an_error() {
        let scratch = Scratch::new();
        let missing = Snapshot::scan(&scratch.0.join("nope")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);

        let dir = write_snapshot(&scratch.0, "s", &[("f", b"x")]).unwrap();
        let snapshot = Snapshot::scan(&dir).unwrap();
        let result = restore(
            &snapshot,
            &scratch.0.join("no-volume"),
            None,
            |_| {},
            || false,
        );
        assert!(matches!(result, Err(CopyError::Io(_))));

        assert!(write_snapshot(&scratch.0, "t", &[("../escape", b"x")]).is_err());
        assert!(write_snapshot(&scratch.0, "a/b", &[]).is_err());
    }

    #[test]
    fn done_files_replace_earlier_ones_and_are_removed_with_their_folder() {
        let scratch = Scratch::new();
        let root = &scratch.0;
        write_done_file(root, "old").unwrap();
        assert!(done_file_exists(root, "old"));
        let file = write_done_file(root, "uid-1").unwrap();
        assert_eq!(file, root.join(".velero/uid-1"));
        assert_eq!(fs::read(&file).unwrap(), b"");
        assert!(done_file_exists(root, "uid-1"));
        assert!(!done_file_exists(root, "old"));
        remove_done_dir(root).unwrap();
        assert!(!root.join(DONE_DIR).exists());
        remove_done_dir(root).unwrap();
    }
}
