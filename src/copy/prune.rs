//! Deleting from the live tree: what the snapshot lacks under the chosen paths (a
//! mirror), or everything but what is excluded (a clear, before a backup is written
//! into an emptied volume). Only through open directory handles, never following a
//! symlink: a symlink is deleted itself, and a directory swapped for one meanwhile is
//! refused, not followed out of the volume.

use std::path::Path;

use super::dir::{Dir, leaf};
use super::select::Matcher;
use super::{CopyError, Summary};

/// `rel`, in `parent`, is in the live tree only. Deleted when chosen, but for what an
/// exclude glob matches below it; looked into when it is a directory that may hold
/// chosen paths. Returns how many entries went, each file, link and directory.
pub(super) fn prune(rel: &Path, parent: &Dir, selection: &Matcher) -> Result<u64, CopyError> {
    if selection.is_excluded(rel) {
        return Ok(0);
    }
    let name = leaf(rel);
    // Gone meanwhile: nothing left to delete.
    let Some(meta) = parent.stat_if_any(name)? else {
        return Ok(0);
    };
    if selection.is_chosen(rel) {
        if !(meta.is_dir() && selection.could_exclude_under(rel)) {
            return parent.remove(name, &meta);
        }
        // Something below may be excluded: only what is not goes.
        let dir = parent.open_dir(name)?;
        let mut deleted = prune_all(rel, &dir, selection)?;
        if dir.names()?.is_empty() {
            parent.remove_dir(name)?;
            deleted += 1;
        }
        Ok(deleted)
    } else if meta.is_dir() && selection.may_contain_chosen(rel) {
        prune_all(rel, &parent.open_dir(name)?, selection)
    } else {
        Ok(0)
    }
}

/// [`prune`] of every entry of `dir`, the directory `rel`.
fn prune_all(rel: &Path, dir: &Dir, selection: &Matcher) -> Result<u64, CopyError> {
    let mut deleted = 0;
    for name in dir.names()? {
        deleted += prune(&rel.join(name), dir, selection)?;
    }
    Ok(deleted)
}

/// Deletes every entry of the tree at `dest` that `keep` chooses (a whole-tree
/// matcher: all but what it excludes); the summary counts them in `deleted`.
pub fn clear(dest: &Path, keep: &Matcher) -> Result<Summary, CopyError> {
    let root = Dir::root(dest)?;
    let mut summary = Summary::default();
    summary.counts.deleted = prune_all(Path::new(""), &root, keep)?;
    Ok(summary)
}
