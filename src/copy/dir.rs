//! A directory of the live tree, held open. The tenant owns that tree and may change
//! it while the copy runs (as root), so every entry the copy looks at, makes, changes
//! or removes there is named relative to an open directory handle (`openat` and the
//! other `*at` calls), by one name and never following a symlink: a directory
//! swapped for a symlink is refused, not followed out of the volume.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

use filetime::FileTime;
use rustix::fs::{AtFlags, Gid, Mode, OFlags, Timespec, Timestamps, Uid};
use rustix::io::Errno;

use super::{CopyError, at};

/// An open directory of the destination, with its path for messages only.
#[derive(Debug)]
pub(super) struct Dir {
    handle: File,
    path: PathBuf,
}

impl Dir {
    /// The destination's root, the one path resolved as given (it is the volume's
    /// mount point, which the tenant cannot change).
    pub(super) fn root(path: &Path) -> Result<Dir, CopyError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd =
            rustix::fs::open(path, flags, Mode::empty()).map_err(|e| at("open", path)(e.into()))?;
        Ok(Dir {
            handle: File::from(fd),
            path: path.to_path_buf(),
        })
    }

    /// This directory's path, for messages.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in this directory, for messages.
    pub(super) fn join(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }

    /// The directory itself, to set its owner, mode, attributes and times.
    pub(super) fn handle(&self) -> &File {
        &self.handle
    }

    /// The subdirectory `name`, opened without following a symlink: anything but a
    /// directory there (a symlink swapped in meanwhile) is an error naming it.
    pub(super) fn open_dir(&self, name: &OsStr) -> Result<Dir, CopyError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.handle, name, flags, Mode::empty()) {
            Ok(fd) => Ok(Dir {
                handle: File::from(fd),
                path: self.join(name),
            }),
            Err(Errno::LOOP | Errno::NOTDIR) => Err(CopyError {
                op: "descend into",
                path: self.join(name),
                source: io::Error::other("not a directory (a symlink there is never followed)"),
            }),
            Err(e) => Err(self.error("open", name, e)),
        }
    }

    /// The directory `rel` below this one, each component opened as [`Dir::open_dir`]
    /// opens it.
    pub(super) fn open_path(&self, rel: &Path) -> Result<Dir, CopyError> {
        let mut dir = Dir {
            handle: self.handle.try_clone().map_err(at("open", &self.path))?,
            path: self.path.clone(),
        };
        for component in rel.components() {
            if let Component::Normal(name) = component {
                dir = dir.open_dir(name)?;
            }
        }
        Ok(dir)
    }

    /// What stands at `name` itself (a symlink's own metadata), or None.
    pub(super) fn stat_if_any(&self, name: &OsStr) -> Result<Option<Metadata>, CopyError> {
        // std's Metadata, read from an O_PATH handle of the entry: fstatat would give
        // rustix's own stat type, which the rest of the copy does not speak.
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let entry = match rustix::fs::openat(&self.handle, name, flags, Mode::empty()) {
            Ok(fd) => File::from(fd),
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.error("lstat", name, e)),
        };
        entry
            .metadata()
            .map(Some)
            .map_err(at("lstat", &self.join(name)))
    }

    /// What stands at `name` itself; an error when nothing does.
    pub(super) fn stat(&self, name: &OsStr) -> Result<Metadata, CopyError> {
        self.stat_if_any(name)?.ok_or_else(|| CopyError {
            op: "lstat",
            path: self.join(name),
            source: io::ErrorKind::NotFound.into(),
        })
    }

    /// The names in this directory.
    pub(super) fn names(&self) -> Result<BTreeSet<OsString>, CopyError> {
        let read = |e: Errno| at("read", &self.path)(e.into());
        let mut names = BTreeSet::new();
        for entry in rustix::fs::Dir::read_from(&self.handle).map_err(read)? {
            let name = entry.map_err(read)?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.insert(OsString::from_vec(name));
            }
        }
        Ok(names)
    }

    /// The regular file `name`, opened to read. Never follows a symlink, and never
    /// waits on a fifo put there: the caller checks the handle's own metadata.
    pub(super) fn open_file(&self, name: &OsStr) -> Result<File, CopyError> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        rustix::fs::openat(&self.handle, name, flags, Mode::empty())
            .map(File::from)
            .map_err(|e| self.error("open", name, e))
    }

    /// A new file `name`, only readable and writable by the copier until its metadata
    /// is set. Fails when anything stands there already, a symlink included.
    pub(super) fn create_file(&self, name: &OsStr) -> Result<File, CopyError> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat(&self.handle, name, flags, Mode::from_raw_mode(0o600))
            .map(File::from)
            .map_err(|e| self.error("create", name, e))
    }

    /// A new directory `name`, only the copier's until its metadata is set.
    pub(super) fn make_dir(&self, name: &OsStr) -> Result<(), CopyError> {
        rustix::fs::mkdirat(&self.handle, name, Mode::from_raw_mode(0o700))
            .map_err(|e| self.error("mkdir", name, e))
    }

    /// A new symlink `name` to `target`.
    pub(super) fn symlink(&self, target: &Path, name: &OsStr) -> Result<(), CopyError> {
        rustix::fs::symlinkat(target, &self.handle, name)
            .map_err(|e| self.error("symlink", name, e))
    }

    /// Where the symlink `name` points.
    pub(super) fn read_link(&self, name: &OsStr) -> Result<PathBuf, CopyError> {
        rustix::fs::readlinkat(&self.handle, name, Vec::new())
            .map(|target| OsString::from_vec(target.into_bytes()).into())
            .map_err(|e| self.error("readlink", name, e))
    }

    /// `name` made a hard link of `from`'s entry `first` (itself, were it a symlink).
    pub(super) fn link(&self, from: &Dir, first: &OsStr, name: &OsStr) -> Result<(), CopyError> {
        rustix::fs::linkat(&from.handle, first, &self.handle, name, AtFlags::empty())
            .map_err(|e| self.error("link", name, e))
    }

    /// `from` renamed to `to` in this directory, over whatever file `to` was.
    pub(super) fn rename(&self, from: &OsStr, to: &OsStr) -> Result<(), CopyError> {
        rustix::fs::renameat(&self.handle, from, &self.handle, to)
            .map_err(|e| self.error("rename to", to, e))
    }

    /// `name` moved into `to` (a directory of the same file system) under the same
    /// name; refused, not replacing anything, when `to` has that name already.
    pub(super) fn move_into(&self, name: &OsStr, to: &Dir) -> Result<(), CopyError> {
        rustix::fs::renameat_with(
            &self.handle,
            name,
            &to.handle,
            name,
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(|e| self.error("move", name, e))
    }

    /// Removes the non-directory `name`.
    pub(super) fn remove_file(&self, name: &OsStr) -> Result<(), CopyError> {
        rustix::fs::unlinkat(&self.handle, name, AtFlags::empty())
            .map_err(|e| self.error("remove", name, e))
    }

    /// Removes the empty directory `name`.
    pub(super) fn remove_dir(&self, name: &OsStr) -> Result<(), CopyError> {
        rustix::fs::unlinkat(&self.handle, name, AtFlags::REMOVEDIR)
            .map_err(|e| self.error("remove", name, e))
    }

    /// Removes the directory `name` with everything in it; how many entries went, the
    /// directory included.
    pub(super) fn remove_all(&self, name: &OsStr) -> Result<u64, CopyError> {
        let dir = self.open_dir(name)?;
        let mut removed = 1;
        for entry in dir.names()? {
            removed += dir.remove(&entry, &dir.stat(&entry)?)?;
        }
        drop(dir);
        self.remove_dir(name)?;
        Ok(removed)
    }

    /// Removes `name`, whose metadata is `meta`, whatever it is; how many entries
    /// went, those in a directory included.
    pub(super) fn remove(&self, name: &OsStr, meta: &Metadata) -> Result<u64, CopyError> {
        if meta.is_dir() {
            self.remove_all(name)
        } else {
            self.remove_file(name).map(|()| 1)
        }
    }

    /// Gives the symlink `name` itself an owner (a symlink cannot be opened to do it).
    pub(super) fn set_link_owner(&self, name: &OsStr, uid: u32, gid: u32) -> Result<(), CopyError> {
        let (uid, gid) = (Uid::from_raw_unchecked(uid), Gid::from_raw_unchecked(gid));
        rustix::fs::chownat(
            &self.handle,
            name,
            Some(uid),
            Some(gid),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| self.error("chown", name, e))
    }

    /// Gives the symlink `name` itself its access and modification times.
    pub(super) fn set_link_times(
        &self,
        name: &OsStr,
        accessed: FileTime,
        modified: FileTime,
    ) -> Result<(), CopyError> {
        let time = |t: FileTime| Timespec {
            tv_sec: t.unix_seconds(),
            tv_nsec: t.nanoseconds().into(),
        };
        let times = Timestamps {
            last_access: time(accessed),
            last_modification: time(modified),
        };
        rustix::fs::utimensat(&self.handle, name, &times, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.error("set times of", name, e))
    }

    fn error(&self, op: &'static str, name: &OsStr, e: Errno) -> CopyError {
        CopyError {
            op,
            path: self.join(name),
            source: e.into(),
        }
    }
}

/// `rel`'s last component, its name in its directory.
pub(super) fn leaf(rel: &Path) -> &OsStr {
    rel.file_name().unwrap_or(rel.as_os_str())
}
