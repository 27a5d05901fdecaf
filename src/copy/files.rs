//! Regular files, symlinks and hard links put in place in the live tree. Files of one
//! link are compared and written by any thread of the walk; files of several links
//! wait for the links pass, which does them one at a time in the walk's order, so
//! that each group is written once and its other names linked to it.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use filetime::FileTime;

use super::compare::same_file;
use super::dir::{Dir, leaf};
use super::meta::{dir_metadata, open_source, set_metadata};
use super::tree::{Copy, clear, lock};
use super::{CopyError, at};

/// Source (device, inode) of a file of several links → its first name, relative to
/// the roots.
type FirstNames = HashMap<(u64, u64), PathBuf>;

impl Copy<'_> {
    /// The regular file `rel`, put in `to` unless it is already right there.
    pub(super) fn file(&self, rel: &Path, to: &Dir, meta: &Metadata) -> Result<(), CopyError> {
        let (name, from) = (leaf(rel), self.source.join(rel));
        let existing = to.stat_if_any(name)?;
        if let Some(existing) = &existing
            && existing.is_file()
            && same_file(&from, meta, to, name, self.options.compare)?
        {
            self.tally(|s| s.counts.unchanged += 1);
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
        self.tally(|s| {
            s.counts.files_written += 1;
            s.counts.bytes_written += meta.len();
        });
        Ok(())
    }

    /// The symlink `rel`, made in `to` unless it is already right there.
    pub(super) fn symlink(&self, rel: &Path, to: &Dir, meta: &Metadata) -> Result<(), CopyError> {
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
            self.tally(|s| s.counts.unchanged += 1);
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
        self.tally(|s| s.counts.links += 1);
        Ok(())
    }

    /// After the walk: the files of several links it met, in its order, then the
    /// metadata of the directories holding them.
    pub(super) fn links_pass(&self) -> Result<(), CopyError> {
        let mut files = std::mem::take(&mut *lock(&self.linked));
        files.sort_by(|a, b| a.0.cmp(&b.0));
        let mut firsts = FirstNames::new();
        for (rel, meta) in &files {
            let to = self.dest.open_path(parent(rel))?;
            self.linked_file(rel, &to, meta, &mut firsts)?;
        }
        let dirs = std::mem::take(&mut *lock(&self.waiting_dirs));
        for (rel, meta) in &dirs {
            dir_metadata(&self.dest.open_path(rel)?, &self.source.join(rel), meta)?;
        }
        Ok(())
    }

    /// The file `rel` of several links: written as any file when it is the first of
    /// its group met, otherwise linked to that first one.
    fn linked_file(
        &self,
        rel: &Path,
        to: &Dir,
        meta: &Metadata,
        firsts: &mut FirstNames,
    ) -> Result<(), CopyError> {
        let key = (meta.dev(), meta.ino());
        let Some(first) = firsts.get(&key) else {
            firsts.insert(key, rel.to_path_buf());
            return self.file(rel, to, meta);
        };
        let name = leaf(rel);
        let existing = to.stat_if_any(name)?;
        let first_dir = self.dest.open_path(parent(first))?;
        let first_ino = first_dir.stat(leaf(first))?.ino();
        if existing.as_ref().is_some_and(|e| e.ino() == first_ino) {
            self.tally(|s| s.counts.unchanged += 1);
            return Ok(());
        }
        clear(to, name, existing.as_ref())?;
        to.link(&first_dir, leaf(first), name)?;
        self.tally(|s| s.counts.links += 1);
        Ok(())
    }
}

/// The directory holding `rel`, relative to the roots.
fn parent(rel: &Path) -> &Path {
    rel.parent().unwrap_or(Path::new(""))
}
