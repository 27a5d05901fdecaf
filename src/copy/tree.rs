//! The copy itself: walks the snapshot (never following a symlink), puts every chosen
//! entry into the live tree with its metadata, and with mirror deletes what the
//! snapshot lacks under the chosen paths.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::fs::{self, Metadata, Permissions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt, lchown, symlink};
use std::path::{Path, PathBuf};

use filetime::FileTime;

use super::select::Matcher;
use super::{CopyError, Summary};

pub struct Copy<'a> {
    source: &'a Path,
    dest: &'a Path,
    selection: &'a Matcher,
    mirror: bool,
    /// Source (device, inode) of files with several links → their first copy.
    linked: HashMap<(u64, u64), PathBuf>,
    pub summary: Summary,
}

fn at<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> CopyError + 'p {
    move |source| CopyError {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl<'a> Copy<'a> {
    pub fn new(source: &'a Path, dest: &'a Path, selection: &'a Matcher, mirror: bool) -> Self {
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
    /// exists in both trees.
    pub fn walk(&mut self, rel: &Path) -> Result<(), CopyError> {
        let names = entries(&self.source.join(rel))?;
        for name in &names {
            let child = rel.join(name);
            if self.selection.is_excluded(&child) {
                continue;
            }
            let from = self.source.join(&child);
            let meta = fs::symlink_metadata(&from).map_err(at("lstat", &from))?;
            if self.selection.is_chosen(&child) {
                self.entry(&child, &meta)?;
            } else if meta.is_dir()
                && self.selection.may_contain_chosen(&child)
                && self.holds_chosen(&child)?
            {
                // Above chosen paths: made when missing, otherwise left as it is. Only
                // when something is put under it: a glob that may match below a
                // directory must not rebuild the snapshot's skeleton in the volume, nor
                // replace what stands there.
                let created = self.directory(&child)?;
                self.walk(&child)?;
                if created {
                    self.metadata(&child, &meta, false)?;
                    self.summary.counts.directories += 1;
                }
            }
        }
        if self.mirror {
            let dest_dir = self.dest.join(rel);
            for name in entries(&dest_dir)?.difference(&names) {
                self.prune(&rel.join(name))?;
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

    /// Puts the chosen entry `rel` in place as the snapshot holds it.
    fn entry(&mut self, rel: &Path, meta: &Metadata) -> Result<(), CopyError> {
        let file_type = meta.file_type();
        if file_type.is_dir() {
            self.directory(rel)?;
            self.walk(rel)?;
            // Last: writing the children changed the directory's times.
            self.metadata(rel, meta, false)?;
            self.summary.counts.directories += 1;
        } else if file_type.is_file() {
            self.file(rel, meta)?;
        } else if file_type.is_symlink() {
            self.symlink(rel, meta)?;
        } else {
            self.summary
                .skipped
                .push(rel.to_string_lossy().into_owned());
        }
        Ok(())
    }

    /// Makes `rel` a directory in the destination; true when it had to be made. Whatever
    /// else stood there goes, so that nothing is ever written through a symlink.
    fn directory(&mut self, rel: &Path) -> Result<bool, CopyError> {
        let to = self.dest.join(rel);
        match fs::symlink_metadata(&to) {
            Ok(m) if m.is_dir() => return Ok(false),
            Ok(_) => fs::remove_file(&to).map_err(at("remove", &to))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(at("lstat", &to)(e)),
        }
        fs::create_dir(&to).map_err(at("mkdir", &to))?;
        Ok(true)
    }

    fn file(&mut self, rel: &Path, meta: &Metadata) -> Result<(), CopyError> {
        let (from, to) = (self.source.join(rel), self.dest.join(rel));
        let existing = fs::symlink_metadata(&to).ok();
        if meta.nlink() > 1 {
            let key = (meta.dev(), meta.ino());
            if let Some(first) = self.linked.get(&key).cloned() {
                let first_ino = fs::symlink_metadata(&first)
                    .map_err(at("lstat", &first))?
                    .ino();
                if existing.as_ref().is_some_and(|e| e.ino() == first_ino) {
                    self.summary.counts.unchanged += 1;
                    return Ok(());
                }
                clear(&to, existing.as_ref())?;
                fs::hard_link(&first, &to).map_err(at("link", &to))?;
                self.summary.counts.links += 1;
                return Ok(());
            }
            self.linked.insert(key, to.clone());
        }
        if let Some(existing) = &existing
            && existing.is_file()
            && same_file(&from, meta, &to, existing)?
        {
            self.summary.counts.unchanged += 1;
            return Ok(());
        }
        // Written beside it and renamed over it: a reader never sees half a file, and a
        // stale hard link of the old file keeps the old content rather than changing.
        let mut temp_name = OsString::from(".refill-copy.");
        temp_name.push(rel.file_name().unwrap_or_default());
        let temp = to.with_file_name(temp_name);
        let _ = fs::remove_file(&temp);
        fs::copy(&from, &temp).map_err(at("copy to", &temp))?;
        self.metadata_of(&temp, &from, meta, false)?;
        if existing.as_ref().is_some_and(Metadata::is_dir) {
            fs::remove_dir_all(&to).map_err(at("remove", &to))?;
        }
        fs::rename(&temp, &to).map_err(at("rename to", &to))?;
        self.summary.counts.files_written += 1;
        self.summary.counts.bytes_written += meta.len();
        Ok(())
    }

    fn symlink(&mut self, rel: &Path, meta: &Metadata) -> Result<(), CopyError> {
        let (from, to) = (self.source.join(rel), self.dest.join(rel));
        let target = fs::read_link(&from).map_err(at("readlink", &from))?;
        let existing = fs::symlink_metadata(&to).ok();
        if let Some(e) = &existing
            && e.file_type().is_symlink()
            && fs::read_link(&to).ok().as_ref() == Some(&target)
            && (e.uid(), e.gid()) == (meta.uid(), meta.gid())
            && FileTime::from_last_modification_time(e)
                == FileTime::from_last_modification_time(meta)
        {
            self.summary.counts.unchanged += 1;
            return Ok(());
        }
        clear(&to, existing.as_ref())?;
        symlink(&target, &to).map_err(at("symlink", &to))?;
        self.metadata(rel, meta, true)?;
        self.summary.counts.links += 1;
        Ok(())
    }

    /// With mirror: `rel` is in the destination only. Deleted when chosen; looked into
    /// when it is a directory that may hold chosen paths.
    fn prune(&mut self, rel: &Path) -> Result<(), CopyError> {
        if self.selection.is_excluded(rel) {
            return Ok(());
        }
        let to = self.dest.join(rel);
        let meta = fs::symlink_metadata(&to).map_err(at("lstat", &to))?;
        if self.selection.is_chosen(rel) {
            if meta.is_dir() && self.selection.could_exclude_under(rel) {
                // Something below may be excluded: only what is not goes.
                for name in entries(&to)? {
                    self.prune(&rel.join(name))?;
                }
                if entries(&to)?.is_empty() {
                    fs::remove_dir(&to).map_err(at("remove", &to))?;
                }
            } else if meta.is_dir() {
                fs::remove_dir_all(&to).map_err(at("remove", &to))?;
            } else {
                fs::remove_file(&to).map_err(at("remove", &to))?;
            }
            self.summary.counts.deleted += 1;
        } else if meta.is_dir() && self.selection.may_contain_chosen(rel) {
            for name in entries(&to)? {
                self.prune(&rel.join(name))?;
            }
        }
        Ok(())
    }

    /// Gives the destination's `rel` the owner, mode, extended attributes and times
    /// the snapshot's `meta` records.
    fn metadata(&self, rel: &Path, meta: &Metadata, is_link: bool) -> Result<(), CopyError> {
        self.metadata_of(&self.dest.join(rel), &self.source.join(rel), meta, is_link)
    }

    fn metadata_of(
        &self,
        to: &Path,
        from: &Path,
        meta: &Metadata,
        is_link: bool,
    ) -> Result<(), CopyError> {
        lchown(to, Some(meta.uid()), Some(meta.gid())).map_err(at("chown", to))?;
        if !is_link {
            // After the owner: chown clears the set-user-ID and set-group-ID bits.
            let mode = Permissions::from_mode(meta.mode() & 0o7777);
            fs::set_permissions(to, mode).map_err(at("chmod", to))?;
            copy_xattrs(from, to)?;
        }
        filetime::set_symlink_file_times(
            to,
            FileTime::from_last_access_time(meta),
            FileTime::from_last_modification_time(meta),
        )
        .map_err(at("set times of", to))
    }
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

/// Removes whatever stands at `path`.
fn clear(path: &Path, existing: Option<&Metadata>) -> Result<(), CopyError> {
    match existing {
        None => Ok(()),
        Some(m) if m.is_dir() => fs::remove_dir_all(path).map_err(at("remove", path)),
        Some(_) => fs::remove_file(path).map_err(at("remove", path)),
    }
}

/// The destination's file already is the snapshot's: same size, times, owner, mode,
/// extended attributes and bytes. The bytes are compared too: a corrupted file may
/// keep its size and times.
fn same_file(from: &Path, a: &Metadata, to: &Path, b: &Metadata) -> Result<bool, CopyError> {
    // A destination linked elsewhere would change with its other name: made anew.
    let same_links = a.nlink() > 1 || b.nlink() == 1;
    let same_meta = same_links
        && a.len() == b.len()
        && FileTime::from_last_modification_time(a) == FileTime::from_last_modification_time(b)
        && (a.uid(), a.gid(), a.mode()) == (b.uid(), b.gid(), b.mode());
    if !same_meta || xattrs(from)? != xattrs(to)? {
        return Ok(false);
    }
    same_bytes(from, to)
}

fn same_bytes(from: &Path, to: &Path) -> Result<bool, CopyError> {
    let mut a = fs::File::open(from).map_err(at("open", from))?;
    let mut b = fs::File::open(to).map_err(at("open", to))?;
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(&mut a, &mut x).map_err(at("read", from))?;
        let m = read_full(&mut b, &mut y).map_err(at("read", to))?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(file: &mut fs::File, buf: &mut [u8]) -> io::Result<usize> {
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
    // The file system keeps no extended attributes (its number differs by architecture).
    e.raw_os_error() == Some(libc::EOPNOTSUPP)
}

/// Every extended attribute of `path`, sorted (none where the file system keeps none).
fn xattrs(path: &Path) -> Result<Vec<(OsString, Vec<u8>)>, CopyError> {
    let names = match xattr::list(path) {
        Ok(names) => names,
        Err(e) if unsupported(&e) => return Ok(Vec::new()),
        Err(e) => return Err(at("list attributes of", path)(e)),
    };
    let mut all = Vec::new();
    for name in names {
        let value = xattr::get(path, &name).map_err(at("read attributes of", path))?;
        all.push((name, value.unwrap_or_default()));
    }
    all.sort();
    Ok(all)
}

fn copy_xattrs(from: &Path, to: &Path) -> Result<(), CopyError> {
    let want = xattrs(from)?;
    let have = xattrs(to)?;
    for (name, _) in &have {
        if !want.iter().any(|(n, _)| n == name) {
            match xattr::remove(to, name) {
                Ok(()) => {}
                Err(e) if unsupported(&e) => {}
                Err(e) => return Err(at("remove attribute of", to)(e)),
            }
        }
    }
    for (name, value) in &want {
        if !have.iter().any(|(n, v)| n == name && v == value) {
            match xattr::set(to, name, value) {
                Ok(()) => {}
                Err(e) if unsupported(&e) => {}
                Err(e) => return Err(at("set attribute of", to)(e)),
            }
        }
    }
    Ok(())
}
