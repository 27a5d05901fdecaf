//! A volume's files set aside in one directory of its root before a backup is written
//! into it, then removed once the backup is in, or put back when it is not. A direct
//! restore that fails therefore leaves the volume as it was, not emptied.
//!
//! Only renames within the volume: nothing is copied, so setting aside costs no space
//! and no time with the volume's size (what the node agent writes beside it does).
//! Each step moves one entry at a time and can be run again after it was killed: a
//! set-aside moves what is left, a tidy removes what is left, and a put-back knows
//! from which directory exists how far it got.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::Path;

use filetime::FileTime;

use super::dir::Dir;
use super::select::Matcher;
use super::{CopyError, Summary, clear};

/// Whether `name` can name the set-aside directory: one plain component, of letters,
/// digits, `.`, `_` and `-` (it is also matched as a glob), not `.` or `..`.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The directory a put-back moves the set-aside entries from, once it has emptied the
/// root of what was written meanwhile: its existence says that emptying is done.
fn putting_back(aside: &OsStr) -> OsString {
    let mut name = aside.to_os_string();
    name.push(".back");
    name
}

/// The directory a tidy removes the set-aside entries from: renamed so first, in one
/// step, so that its existence says a tidy began. A put-back never runs after that: the
/// backup is in, and some of what was set aside may already be gone.
fn tidying(aside: &OsStr) -> OsString {
    let mut name = aside.to_os_string();
    name.push(".tidy");
    name
}

/// Moves every entry of `dest`'s root but `aside` itself and what `keep` excludes into
/// the directory `aside` there (made if missing); `deleted` counts the entries moved
/// (from the volume's view, they are gone).
pub(crate) fn set_aside(dest: &Path, aside: &OsStr, keep: &Matcher) -> Result<Summary, CopyError> {
    // Only the root's entries move: an exclude below it would move with its parent.
    let root = Dir::root(dest)?;
    let back = putting_back(aside);
    refuse_if_there(
        &root,
        &back,
        "a put-back of the set-aside files is under way",
    )?;
    // The backup is in beside what a tidy removes: setting it aside now would lose it.
    refuse_if_there(
        &root,
        &tidying(aside),
        "a tidy of the set-aside files began: the backup is in",
    )?;
    // The moves change the root's times: the directory keeps them for a put-back.
    let made = match root.stat_if_any(aside)? {
        Some(_) => None,
        None => {
            let times = times(&root)?;
            root.make_dir(aside)?;
            Some(times)
        }
    };
    let into = root.open_dir(aside)?;
    let mut summary = Summary::default();
    for name in root.names()? {
        if name == aside || keep.is_excluded(Path::new(&name)) {
            continue;
        }
        root.move_into(&name, &into)?;
        summary.counts.deleted += 1;
    }
    if let Some((accessed, modified)) = made {
        filetime::set_file_handle_times(into.handle(), Some(accessed), Some(modified))
            .map_err(super::at("set times of", into.path()))?;
    }
    Ok(summary)
}

/// `dir`'s access and modification times.
fn times(dir: &Dir) -> Result<(FileTime, FileTime), CopyError> {
    let meta = dir
        .handle()
        .metadata()
        .map_err(super::at("stat", dir.path()))?;
    Ok((
        FileTime::from_last_access_time(&meta),
        FileTime::from_last_modification_time(&meta),
    ))
}

/// Removes the directory `aside` of `dest`'s root with everything in it, if it is there.
/// Renamed first, so that a put-back run after a tidy began refuses instead of deleting
/// the backup for a part of the old files.
pub(crate) fn tidy(dest: &Path, aside: &OsStr) -> Result<Summary, CopyError> {
    let root = Dir::root(dest)?;
    let gone = tidying(aside);
    let mut summary = Summary::default();
    if root.stat_if_any(aside)?.is_some() {
        root.rename(aside, &gone)?;
    }
    if root.stat_if_any(&gone)?.is_some() {
        summary.counts.deleted = root.remove_all(&gone)?;
    }
    Ok(summary)
}

/// Puts the entries set aside in `aside` back into `dest`'s root. With `delete_written`,
/// what was written there meanwhile goes first: all but `aside` and what those globs
/// (as `--exclude` takes them) match. Without, an entry in both places stops it.
/// `deleted` counts the entries deleted, `unchanged` those put back. `aside` is a
/// [`valid_name`].
pub(crate) fn put_back(
    dest: &Path,
    aside: &str,
    delete_written: Option<&[String]>,
) -> Result<Summary, CopyError> {
    let root = Dir::root(dest)?;
    let back = putting_back(OsStr::new(aside));
    let aside = OsStr::new(aside);
    refuse_if_there(
        &root,
        &tidying(aside),
        "a tidy of the set-aside files began: the backup is in, and is left as it is",
    )?;
    let mut summary = Summary::default();
    if root.stat_if_any(aside)?.is_some()
        && let Some(exclude) = delete_written
    {
        let mut keep = exclude.to_vec();
        keep.extend([aside, &back].map(|n| n.to_string_lossy().into_owned()));
        let written = Matcher::whole(&keep).map_err(|why| refused(&root, aside, &why))?;
        summary.counts.deleted = clear(dest, &written)?.counts.deleted;
    }
    // From here the root holds nothing to delete: a put-back run again after this
    // rename only moves entries.
    if root.stat_if_any(aside)?.is_some() {
        root.rename(aside, &back)?;
    }
    if root.stat_if_any(&back)?.is_none() {
        return Ok(summary);
    }
    let from = root.open_dir(&back)?;
    let (accessed, modified) = times(&from)?;
    let keep_times = |dir: &Dir| {
        filetime::set_file_handle_times(dir.handle(), Some(accessed), Some(modified))
            .map_err(super::at("set times of", dir.path()))
    };
    for name in from.names()? {
        from.move_into(&name, &root)?;
        // Each move changes them; a put-back run again after a kill reads them here.
        keep_times(&from)?;
        summary.counts.unchanged += 1;
    }
    drop(from);
    root.remove_dir(&back)?;
    keep_times(&root)?;
    Ok(summary)
}

/// Refuses with `why` when the root holds `name`: a step that another one began rules
/// out.
fn refuse_if_there(root: &Dir, name: &OsStr, why: &str) -> Result<(), CopyError> {
    match root.stat_if_any(name)? {
        Some(_) => Err(refused(root, name, why)),
        None => Ok(()),
    }
}

fn refused(root: &Dir, name: &OsStr, why: &str) -> CopyError {
    CopyError {
        op: "set aside into",
        path: root.join(name),
        source: io::Error::other(why),
    }
}
