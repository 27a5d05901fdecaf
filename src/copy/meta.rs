//! Metadata as the snapshot holds it, set on open handles of the live tree: owner,
//! mode, extended attributes and times.

use std::ffi::OsString;
use std::fs::{File, Metadata, Permissions};
use std::os::unix::fs::{MetadataExt, PermissionsExt, fchown};
use std::path::Path;

use filetime::FileTime;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use xattr::FileExt;

use super::dir::Dir;
use super::{CopyError, at};

/// Gives the destination's directory `dir` the owner, mode, extended attributes and
/// times of the snapshot's `from`, whose metadata is `meta`.
pub(super) fn dir_metadata(dir: &Dir, from: &Path, meta: &Metadata) -> Result<(), CopyError> {
    set_metadata(dir.handle(), dir.path(), &open_source(from)?, from, meta)
}

/// Gives the destination's root the metadata of the snapshot's root. That root is
/// followed when a symlink, as the walk reads it: it is refill's own mount.
pub(super) fn root_metadata(root: &Dir, source: &Path) -> Result<(), CopyError> {
    let from = File::open(source).map_err(at("open", source))?;
    let meta = from.metadata().map_err(at("stat", source))?;
    set_metadata(root.handle(), root.path(), &from, source, &meta)
}

/// Gives `to` (open, at `to_path`) the owner, mode, extended attributes and times the
/// snapshot's `from` (open, at `from_path`) has, as `meta` records them.
pub(super) fn set_metadata(
    to: &File,
    to_path: &Path,
    from: &File,
    from_path: &Path,
    meta: &Metadata,
) -> Result<(), CopyError> {
    fchown(to, Some(meta.uid()), Some(meta.gid())).map_err(at("chown", to_path))?;
    // After the owner: chown clears the set-user-ID and set-group-ID bits.
    to.set_permissions(Permissions::from_mode(meta.mode() & 0o7777))
        .map_err(at("chmod", to_path))?;
    copy_xattrs(from, from_path, to, to_path)?;
    filetime::set_file_handle_times(
        to,
        Some(FileTime::from_last_access_time(meta)),
        Some(FileTime::from_last_modification_time(meta)),
    )
    .map_err(at("set times of", to_path))
}

/// Opens the snapshot's file or directory `path` to read, never through a symlink.
pub(super) fn open_source(path: &Path) -> Result<File, CopyError> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::open(path, flags, Mode::empty())
        .map(File::from)
        .map_err(|e| at("open", path)(e.into()))
}

fn unsupported(e: &std::io::Error) -> bool {
    // The file system keeps no extended attributes.
    e.raw_os_error() == Some(Errno::OPNOTSUPP.raw_os_error())
}

/// Every extended attribute of the open `file` (at `path`), sorted (none where the file
/// system keeps none).
pub(super) fn xattrs(file: &File, path: &Path) -> Result<Vec<(OsString, Vec<u8>)>, CopyError> {
    let names = match file.list_xattr() {
        Ok(names) => names,
        Err(e) if unsupported(&e) => return Ok(Vec::new()),
        Err(e) => return Err(at("list attributes of", path)(e)),
    };
    let mut all = Vec::new();
    for name in names {
        let value = file
            .get_xattr(&name)
            .map_err(at("read attributes of", path))?;
        all.push((name, value.unwrap_or_default()));
    }
    all.sort();
    Ok(all)
}

fn copy_xattrs(from: &File, from_path: &Path, to: &File, to_path: &Path) -> Result<(), CopyError> {
    let want = xattrs(from, from_path)?;
    let have = xattrs(to, to_path)?;
    for (name, _) in &have {
        if !want.iter().any(|(n, _)| n == name) {
            match to.remove_xattr(name) {
                Ok(()) => {}
                Err(e) if unsupported(&e) => {}
                Err(e) => return Err(at("remove attribute of", to_path)(e)),
            }
        }
    }
    for (name, value) in &want {
        if !have.iter().any(|(n, v)| n == name && v == value) {
            match to.set_xattr(name, value) {
                Ok(()) => {}
                Err(e) if unsupported(&e) => {}
                Err(e) => return Err(at("set attribute of", to_path)(e)),
            }
        }
    }
    Ok(())
}
