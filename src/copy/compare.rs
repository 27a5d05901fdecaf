//! Whether a live file already is the snapshot's, so that it is left as it is.

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use filetime::FileTime;

use super::dir::Dir;
use super::meta::{open_source, xattrs};
use super::options::Compare;
use super::{CopyError, at};

/// The destination's file `name` in `to` already is the snapshot's `from`: same size,
/// times, owner, mode, extended attributes and, comparing `Contents`, bytes. The bytes
/// are compared by default: a corrupted file may keep its size and times.
pub(super) fn same_file(
    from: &Path,
    a: &Metadata,
    to: &Dir,
    name: &OsStr,
    compare: Compare,
) -> Result<bool, CopyError> {
    let to_path = to.join(name);
    let mut theirs = to.open_file(name)?;
    // The metadata of what was opened: what stands there may have changed since.
    let b = theirs.metadata().map_err(at("lstat", &to_path))?;
    if !same_metadata(a, &b) {
        return Ok(false);
    }
    let mut ours = open_source(from)?;
    if xattrs(&ours, from)? != xattrs(&theirs, &to_path)? {
        return Ok(false);
    }
    match compare {
        Compare::Metadata => Ok(true),
        Compare::Contents => same_bytes(&mut ours, from, &mut theirs, &to_path, a.len()),
    }
}

/// The snapshot's file (`a`) and the live one (`b`) agree in all but bytes and
/// extended attributes.
fn same_metadata(a: &Metadata, b: &Metadata) -> bool {
    // A destination linked elsewhere would change with its other name: made anew.
    let same_links = a.nlink() > 1 || b.nlink() == 1;
    b.is_file()
        && same_links
        && a.len() == b.len()
        && FileTime::from_last_modification_time(a) == FileTime::from_last_modification_time(b)
        && (a.uid(), a.gid(), a.mode()) == (b.uid(), b.gid(), b.mode())
}

/// The largest piece of each file read at once.
const CHUNK: usize = 256 * 1024;

/// What is read of each file at once: no more than a file of `len` bytes holds, so
/// that comparing many small files does not allocate large buffers for each.
fn buffer_size(len: u64) -> usize {
    usize::try_from(len).unwrap_or(CHUNK).clamp(1, CHUNK)
}

fn same_bytes(
    a: &mut File,
    from: &Path,
    b: &mut File,
    to: &Path,
    len: u64,
) -> Result<bool, CopyError> {
    let size = buffer_size(len);
    let (mut x, mut y) = (vec![0u8; size], vec![0u8; size]);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_no_larger_than_the_file_nor_a_chunk() {
        let cases = [
            (0, 1),
            (1, 1),
            (4096, 4096),
            (CHUNK as u64, CHUNK),
            (u64::MAX, CHUNK),
        ];
        for (len, want) in cases {
            assert_eq!(buffer_size(len), want, "{len} bytes");
        }
    }
}
