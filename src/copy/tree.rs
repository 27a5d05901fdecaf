//! The copy itself: walks the snapshot (never following a symlink), puts every chosen
//! entry into the live tree with its metadata, and with mirror deletes what the
//! snapshot lacks under the chosen paths. The snapshot, refill's own, is read by path;
//! the live tree, which its owner may change meanwhile, only through open directory
//! handles ([`Dir`]), and metadata is set on the handle of what was made.

use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, Metadata, Permissions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt, fchown};
use std::path::{Path, PathBuf};

use filetime::FileTime;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use xattr::FileExt;

use super::dir::{Dir, leaf};
use super::select::Matcher;
use super::{CopyError, Summary, at};

pub struct Copy<'a> {
    source: &'a Path,
    dest: &'a Dir,
    selection: &'a Matcher,
    mirror: bool,
    /// Source (device, inode) of files with several links → their first copy,
    /// relative to the destination's root.
    linked: HashMap<(u64, u64), PathBuf>,
    pub summary: Summary,
}

impl<'a> Copy<'a> {
    pub fn new(source: &'a Path, dest: &'a Dir, selection: &'a Matcher, mirror: bool) -> Self {
        Copy {
            source,
            dest,
            selection,
            mirror,
            linked: HashMap::new(),
            summary: Summary::default(),
        }
    }

    /// Walks the directory `rel` (relative to both roots; empty for the roots), which
    /// exists in both trees; `to` is the destination's.
    pub fn walk(&mut self, rel: &Path, to: &Dir) -> Result<(), CopyError> {
        let names = entries(&self.source.join(rel))?;
        for name in &names {
            let child = rel.join(name);
            if self.selection.is_excluded(&child) {
                continue;
            }
            let from = self.source.join(&child);
            let meta = fs::symlink_metadata(&from).map_err(at("lstat", &from))?;
            if self.selection.is_chosen(&child) {
                self.entry(&child, to, &meta)?;
            } else if meta.is_dir()
                && self.selection.may_contain_chosen(&child)
                && self.holds_chosen(&child)?
            {
                // Above chosen paths: made when missing, otherwise left as it is. Only
                // when something is put under it: a glob that may match below a
                // directory must not rebuild the snapshot's skeleton in the volume, nor
                // replace what stands there.
                let (dir, created) = directory(to, name)?;
                self.walk(&child, &dir)?;
                if created {
                    dir_metadata(&dir, &from, &meta)?;
                    self.summary.counts.directories += 1;
                }
            }
        }
        if self.mirror {
            for name in to.names()?.difference(&names) {
                self.prune(&rel.join(name), to)?;
            }
        }
        Ok(())
    }

    /// The snapshot's directory `rel` holds a chosen entry somewhere below.
    fn holds_chosen(&self, rel: &Path) -> Result<bool, CopyError> {
        for name in entries(&self.source.join(rel))? {
            let child = rel.join(name);
            if self.selection.is_excluded(&child) {
                continue;
            }
            if self.selection.is_chosen(&child) {
                return Ok(true);
            }
            let from = self.source.join(&child);
            let meta = fs::symlink_metadata(&from).map_err(at("lstat", &from))?;
            if meta.is_dir()
                && self.selection.may_contain_chosen(&child)
                && self.holds_chosen(&child)?
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Puts the chosen entry `rel` in place in `to` as the snapshot holds it.
    fn entry(&mut self, rel: &Path, to: &Dir, meta: &Metadata) -> Result<(), CopyError> {
        let file_type = meta.file_type();
        if file_type.is_dir() {
            let (dir, _) = directory(to, leaf(rel))?;
            self.walk(rel, &dir)?;
            // Last: writing the children changed the directory's times.
            dir_metadata(&dir, &self.source.join(rel), meta)?;
            self.summary.counts.directories += 1;
        } else if file_type.is_file() {
            self.file(rel, to, meta)?;
        } else if file_type.is_symlink() {
            self.symlink(rel, to, meta)?;
        } else {
            self.summary
                .skipped
                .push(rel.to_string_lossy().into_owned());
        }
        Ok(())
    }

    fn file(&mut self, rel: &Path, to: &Dir, meta: &Metadata) -> Result<(), CopyError> {
        let (name, from) = (leaf(rel), self.source.join(rel));
        let existing = to.stat_if_any(name)?;
        if meta.nlink() > 1 {
            let key = (meta.dev(), meta.ino());
            if let Some(first) = self.linked.get(&key) {
                let first_dir = self
                    .dest
                    .open_path(first.parent().unwrap_or(Path::new("")))?;
                let first_ino = first_dir.stat(leaf(first))?.ino();
                if existing.as_ref().is_some_and(|e| e.ino() == first_ino) {
                    self.summary.counts.unchanged += 1;
                    return Ok(());
                }
                clear(to, name, existing.as_ref())?;
                to.link(&first_dir, leaf(first), name)?;
                self.summary.counts.links += 1;
                return Ok(());
            }
            self.linked.insert(key, rel.to_path_buf());
        }
        if let Some(existing) = &existing
            && existing.is_file()
            && same_file(&from, meta, to, name)?
        {
            self.summary.counts.unchanged += 1;
            return Ok(());
        }
        // Written beside it and renamed over it: a reader never sees half a file, and a
        // stale hard link of the old file keeps the old content rather than changing.
        // Made anew (whatever stood at the temporary name goes first) and never opened
        // through a symlink; its metadata is set on its handle.
        let mut input = open_source(&from)?;
        let mut temp = OsString::from(".refill-copy.");
        temp.push(name);
        let _ = to.remove_file(&temp);
        let written = to.create_file(&temp)?;
        let temp_path = to.join(&temp);
        io::copy(&mut input, &mut &written).map_err(at("copy to", &temp_path))?;
        set_metadata(&written, &temp_path, &input, &from, meta)?;
        if existing.as_ref().is_some_and(Metadata::is_dir) {
            to.remove_all(name)?;
        }
        to.rename(&temp, name)?;
        self.summary.counts.files_written += 1;
        self.summary.counts.bytes_written += meta.len();
        Ok(())
    }

    fn symlink(&mut self, rel: &Path, to: &Dir, meta: &Metadata) -> Result<(), CopyError> {
        let (name, from) = (leaf(rel), self.source.join(rel));
        let target = fs::read_link(&from).map_err(at("readlink", &from))?;
        let existing = to.stat_if_any(name)?;
        if let Some(e) = &existing
            && e.file_type().is_symlink()
            && to.read_link(name).ok().as_ref() == Some(&target)
            && (e.uid(), e.gid()) == (meta.uid(), meta.gid())
            && FileTime::from_last_modification_time(e)
                == FileTime::from_last_modification_time(meta)
        {
            self.summary.counts.unchanged += 1;
            return Ok(());
        }
        clear(to, name, existing.as_ref())?;
        to.symlink(&target, name)?;
        // A symlink cannot be opened to set these: set by name, never following it.
        to.set_link_owner(name, meta.uid(), meta.gid())?;
        to.set_link_times(
            name,
            FileTime::from_last_access_time(meta),
            FileTime::from_last_modification_time(meta),
        )?;
        self.summary.counts.links += 1;
        Ok(())
    }

    /// With mirror: `rel` is in the destination only, in `parent`. Deleted when chosen;
    /// looked into when it is a directory that may hold chosen paths.
    fn prune(&mut self, rel: &Path, parent: &Dir) -> Result<(), CopyError> {
        if self.selection.is_excluded(rel) {
            return Ok(());
        }
        let name = leaf(rel);
        let meta = parent.stat(name)?;
        if self.selection.is_chosen(rel) {
            if meta.is_dir() && self.selection.could_exclude_under(rel) {
                // Something below may be excluded: only what is not goes.
                let dir = parent.open_dir(name)?;
                for child in dir.names()? {
                    self.prune(&rel.join(child), &dir)?;
                }
                if dir.names()?.is_empty() {
                    parent.remove_dir(name)?;
                }
            } else {
                parent.remove(name, &meta)?;
            }
            self.summary.counts.deleted += 1;
        } else if meta.is_dir() && self.selection.may_contain_chosen(rel) {
            let dir = parent.open_dir(name)?;
            for child in dir.names()? {
                self.prune(&rel.join(child), &dir)?;
            }
        }
        Ok(())
    }
}

/// Makes `name` a directory in `parent` and opens it; true when it had to be made.
/// Whatever else stood there goes, so that nothing is ever written through a symlink.
fn directory(parent: &Dir, name: &OsStr) -> Result<(Dir, bool), CopyError> {
    let existing = parent.stat_if_any(name)?;
    let made = !existing.as_ref().is_some_and(Metadata::is_dir);
    if made {
        clear(parent, name, existing.as_ref())?;
        parent.make_dir(name)?;
    }
    Ok((parent.open_dir(name)?, made))
}

/// Gives the destination's directory `dir` the owner, mode, extended attributes and
/// times of the snapshot's `from`, whose metadata is `meta`.
fn dir_metadata(dir: &Dir, from: &Path, meta: &Metadata) -> Result<(), CopyError> {
    set_metadata(dir.handle(), dir.path(), &open_source(from)?, from, meta)
}

/// Gives `to` (open, at `to_path`) the owner, mode, extended attributes and times the
/// snapshot's `from` (open, at `from_path`) has, as `meta` records them.
fn set_metadata(
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
fn open_source(path: &Path) -> Result<File, CopyError> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::open(path, flags, Mode::empty())
        .map(File::from)
        .map_err(|e| at("open", path)(e.into()))
}

/// Removes whatever stands at `name` in `dir`.
fn clear(dir: &Dir, name: &OsStr, existing: Option<&Metadata>) -> Result<(), CopyError> {
    existing.map_or(Ok(()), |meta| dir.remove(name, meta))
}

/// The names in a directory (none when it does not exist).
fn entries(dir: &Path) -> Result<BTreeSet<OsString>, CopyError> {
    match fs::read_dir(dir) {
        Ok(read) => read
            .map(|e| e.map(|e| e.file_name()).map_err(at("read", dir)))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(BTreeSet::new()),
        Err(e) => Err(at("read", dir)(e)),
    }
}

/// The destination's file `name` in `to` already is the snapshot's `from`: same size,
/// times, owner, mode, extended attributes and bytes. The bytes are compared too: a
/// corrupted file may keep its size and times.
fn same_file(from: &Path, a: &Metadata, to: &Dir, name: &OsStr) -> Result<bool, CopyError> {
    let to_path = to.join(name);
    let mut theirs = to.open_file(name)?;
    // The metadata of what was opened: what stands there may have changed since.
    let b = theirs.metadata().map_err(at("lstat", &to_path))?;
    // A destination linked elsewhere would change with its other name: made anew.
    let same_links = a.nlink() > 1 || b.nlink() == 1;
    let same_meta = b.is_file()
        && same_links
        && a.len() == b.len()
        && FileTime::from_last_modification_time(a) == FileTime::from_last_modification_time(&b)
        && (a.uid(), a.gid(), a.mode()) == (b.uid(), b.gid(), b.mode());
    if !same_meta {
        return Ok(false);
    }
    let mut ours = open_source(from)?;
    if xattrs(&ours, from)? != xattrs(&theirs, &to_path)? {
        return Ok(false);
    }
    same_bytes(&mut ours, from, &mut theirs, &to_path)
}

fn same_bytes(a: &mut File, from: &Path, b: &mut File, to: &Path) -> Result<bool, CopyError> {
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(a, &mut x).map_err(at("read", from))?;
        let m = read_full(b, &mut y).map_err(at("read", to))?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

fn unsupported(e: &io::Error) -> bool {
    // The file system keeps no extended attributes.
    e.raw_os_error() == Some(Errno::OPNOTSUPP.raw_os_error())
}

/// Every extended attribute of the open `file` (at `path`), sorted (none where the file
/// system keeps none).
fn xattrs(file: &File, path: &Path) -> Result<Vec<(OsString, Vec<u8>)>, CopyError> {
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
