//! The walk: goes through the snapshot (never following a symlink), puts every chosen
//! entry into the live tree with its metadata, and with mirror deletes what the
//! snapshot lacks under the chosen paths. The snapshot, refill's own, is read by path;
//! the live tree, which its owner may change meanwhile, only through open directory
//! handles ([`Dir`]), and metadata is set on the handle of what was made.
//!
//! The entries of each directory are done in parallel, subdirectories included (see
//! `files.rs` for files and links); a directory's deletions and metadata come once
//! everything below it is done, its times last.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rayon::prelude::*;

use super::dir::{Dir, leaf};
use super::meta::dir_metadata;
use super::options::Options;
use super::prune::prune;
use super::select::Matcher;
use super::{CopyError, Summary, at};

pub(super) struct Copy<'a> {
    pub(super) source: &'a Path,
    pub(super) dest: &'a Dir,
    pub(super) selection: &'a Matcher,
    pub(super) options: &'a Options,
    /// What was done so far, by every thread.
    summary: Mutex<Summary>,
    /// Files of several links met by the walk: put in place after it, one at a time.
    pub(super) linked: Mutex<Vec<(PathBuf, Metadata)>>,
    /// Directories holding one of those files, with the snapshot's metadata: set
    /// once the file is in place, which changes the directory's times.
    pub(super) waiting_dirs: Mutex<Vec<(PathBuf, Metadata)>>,
}

/// Whether an entry's directory must wait for the links pass before its metadata is
/// set: it holds a file of several links, left for that pass.
type Waits = bool;

impl<'a> Copy<'a> {
    pub(super) fn new(
        source: &'a Path,
        dest: &'a Dir,
        selection: &'a Matcher,
        options: &'a Options,
    ) -> Self {
        Copy {
            source,
            dest,
            selection,
            options,
            summary: Mutex::default(),
            linked: Mutex::default(),
            waiting_dirs: Mutex::default(),
        }
    }

    /// What was done, skipped paths in order whatever thread met them.
    pub(super) fn into_summary(self) -> Summary {
        let mut summary = self
            .summary
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        // In the order a walk of one thread meets them: by path, component by component.
        summary
            .skipped
            .sort_by(|a, b| Path::new(a).cmp(Path::new(b)));
        summary.counts.skipped_count = summary.skipped.len() as u64;
        summary
    }

    /// Counts something done.
    pub(super) fn tally(&self, count: impl FnOnce(&mut Summary)) {
        count(&mut lock(&self.summary));
    }

    /// Walks the directory `rel` (relative to both roots; empty for the roots), which
    /// exists in both trees; `to` is the destination's. Its entries are done in
    /// parallel, and with mirror what it has that the snapshot lacks goes after them
    /// (not before: a file being written there has a temporary name).
    pub(super) fn walk(&self, rel: &Path, to: &Dir) -> Result<Waits, CopyError> {
        let names = entries(&self.source.join(rel))?;
        let waits = names
            .par_iter()
            .map(|name| self.child(&rel.join(name), to))
            .try_reduce(|| false, |a, b| Ok(a || b))?;
        if self.options.mirror {
            for name in to.names()?.difference(&names) {
                let deleted = prune(&rel.join(name), to, self.selection)?;
                self.tally(|s| s.counts.deleted += deleted);
            }
        }
        Ok(waits)
    }

    /// The entry `rel` of the directory `to`, whatever the selection makes of it.
    fn child(&self, rel: &Path, to: &Dir) -> Result<Waits, CopyError> {
        if self.selection.is_excluded(rel) {
            return Ok(false);
        }
        let from = self.source.join(rel);
        let meta = fs::symlink_metadata(&from).map_err(at("lstat", &from))?;
        if self.selection.is_chosen(rel) {
            return self.entry(rel, to, &meta);
        }
        if meta.is_dir() && self.selection.may_contain_chosen(rel) && self.holds_chosen(rel)? {
            // Above chosen paths: made when missing, otherwise left as it is. Only
            // when something is put under it: a glob that may match below a
            // directory must not rebuild the snapshot's skeleton in the volume, nor
            // replace what stands there.
            let (dir, created) = directory(to, leaf(rel))?;
            let waits = self.walk(rel, &dir)?;
            if created {
                self.finish_dir(rel, &dir, &meta, waits)?;
            }
        }
        Ok(false)
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
    fn entry(&self, rel: &Path, to: &Dir, meta: &Metadata) -> Result<Waits, CopyError> {
        let file_type = meta.file_type();
        if file_type.is_dir() {
            let (dir, _) = directory(to, leaf(rel))?;
            let waits = self.walk(rel, &dir)?;
            self.finish_dir(rel, &dir, meta, waits)?;
        } else if file_type.is_file() && meta.nlink() > 1 {
            // Which name of a group is written and which are linked to it depends on
            // the order they are met in: kept the walk's order, one at a time.
            lock(&self.linked).push((rel.to_path_buf(), meta.clone()));
            return Ok(true);
        } else if file_type.is_file() {
            self.file(rel, to, meta)?;
        } else if file_type.is_symlink() {
            self.symlink(rel, to, meta)?;
        } else {
            self.tally(|s| s.skipped.push(rel.to_string_lossy().into_owned()));
        }
        Ok(false)
    }

    /// Gives the directory `rel`, everything below it done, the snapshot's metadata
    /// (`meta`), now or, when it `waits` for the links pass, after that pass.
    fn finish_dir(
        &self,
        rel: &Path,
        dir: &Dir,
        meta: &Metadata,
        waits: Waits,
    ) -> Result<(), CopyError> {
        if waits {
            lock(&self.waiting_dirs).push((rel.to_path_buf(), meta.clone()));
        } else {
            // Last: writing the children changed the directory's times.
            dir_metadata(dir, &self.source.join(rel), meta)?;
        }
        self.tally(|s| s.counts.directories += 1);
        Ok(())
    }
}

/// The lock of `mutex`, whose data stays whole when a thread panicked holding it
/// (each holder only adds to it).
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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

/// Removes whatever stands at `name` in `dir`.
pub(super) fn clear(dir: &Dir, name: &OsStr, existing: Option<&Metadata>) -> Result<(), CopyError> {
    existing.map_or(Ok(()), |meta| dir.remove(name, meta).map(drop))
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
