//! Copies between real directory trees (as root, as the copier runs).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, lchown, symlink};
use std::path::Path;

use filetime::FileTime;

use super::*;

fn selection(include: &[&str], exclude: &[&str]) -> Matcher {
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Matcher::new(&Selection {
        include: owned(include),
        exclude: owned(exclude),
    })
    .unwrap()
}

fn write(root: &Path, rel: &str, content: &[u8]) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn read(root: &Path, rel: &str) -> Vec<u8> {
    fs::read(root.join(rel)).unwrap()
}

fn mtime(path: &Path) -> FileTime {
    FileTime::from_last_modification_time(&fs::symlink_metadata(path).unwrap())
}

fn trees() -> (tempfile::TempDir, tempfile::TempDir) {
    (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap())
}

#[test]
fn corrupted_and_deleted_files_come_back_and_newer_files_elsewhere_stay() {
    let (backup, live) = trees();
    let (b, l) = (backup.path(), live.path());
    for root in [b, l] {
        write(root, "db/a.dat", b"good a");
        write(root, "db/b.dat", b"good b");
        write(root, "db/c.dat", b"good c");
        write(root, "logs/app.log", b"old log");
    }
    write(l, "db/a.dat", b"CORRUPT");
    write(l, "db/b.dat", b"broken");
    fs::remove_file(l.join("db/c.dat")).unwrap();
    write(l, "logs/app.log", b"newer log, kept");
    write(l, "notes.txt", b"written since the backup");

    let summary = copy(b, l, &selection(&["db"], &[]), false).unwrap();
    for name in ["a", "b", "c"] {
        assert_eq!(
            read(l, &format!("db/{name}.dat")),
            format!("good {name}").as_bytes()
        );
    }
    assert_eq!(read(l, "logs/app.log"), b"newer log, kept");
    assert_eq!(read(l, "notes.txt"), b"written since the backup");
    assert_eq!(summary.counts.files_written, 3, "{summary:?}");
    assert_eq!(summary.counts.bytes_written, 18);
}

#[test]
fn owners_modes_times_links_and_attributes_are_kept() {
    let (backup, live) = trees();
    let (b, l) = (backup.path(), live.path());
    write(b, "app/run.sh", b"#!/bin/true\n");
    let run = b.join("app/run.sh");
    lchown(&run, Some(1234), Some(5678)).unwrap();
    // Set after chown, which clears it: the copy must do the same.
    fs::set_permissions(&run, fs::Permissions::from_mode(0o4750)).unwrap();
    let stamp = FileTime::from_unix_time(1_600_000_000, 123_456_789);
    filetime::set_file_times(&run, stamp, stamp).unwrap();
    xattr::set(&run, "user.refill", b"kept").unwrap();
    symlink("run.sh", b.join("app/current")).unwrap();
    symlink("/nowhere/at/all", b.join("app/dangling")).unwrap();
    lchown(b.join("app/current"), Some(1234), Some(5678)).unwrap();
    fs::hard_link(&run, b.join("app/run-again.sh")).unwrap();
    fs::set_permissions(b.join("app"), fs::Permissions::from_mode(0o710)).unwrap();
    lchown(b.join("app"), Some(42), Some(43)).unwrap();
    let dir_stamp = FileTime::from_unix_time(1_500_000_000, 5);
    filetime::set_file_times(b.join("app"), dir_stamp, dir_stamp).unwrap();
    // A stale attribute in the live copy goes.
    write(l, "app/run.sh", b"old");
    xattr::set(l.join("app/run.sh"), "user.stale", b"x").unwrap();

    copy(b, l, &selection(&["app"], &[]), false).unwrap();
    let got = fs::metadata(l.join("app/run.sh")).unwrap();
    assert_eq!((got.uid(), got.gid()), (1234, 5678));
    assert_eq!(got.mode() & 0o7777, 0o4750, "setuid survives the chown");
    assert_eq!(FileTime::from_last_modification_time(&got), stamp);
    assert_eq!(
        xattr::get(l.join("app/run.sh"), "user.refill").unwrap(),
        Some(b"kept".to_vec())
    );
    assert_eq!(
        xattr::get(l.join("app/run.sh"), "user.stale").unwrap(),
        None
    );
    assert_eq!(
        fs::read_link(l.join("app/current")).unwrap(),
        Path::new("run.sh")
    );
    let link = fs::symlink_metadata(l.join("app/current")).unwrap();
    assert_eq!((link.uid(), link.gid()), (1234, 5678));
    assert_eq!(
        fs::read_link(l.join("app/dangling")).unwrap(),
        Path::new("/nowhere/at/all")
    );
    let again = fs::metadata(l.join("app/run-again.sh")).unwrap();
    assert_eq!(again.ino(), got.ino(), "hard links stay one file");
    let dir = fs::metadata(l.join("app")).unwrap();
    assert_eq!((dir.uid(), dir.gid(), dir.mode() & 0o7777), (42, 43, 0o710));
    assert_eq!(mtime(&l.join("app")), dir_stamp, "set after its children");
}

#[test]
fn files_already_right_are_left_but_same_size_corruption_is_found() {
    let (backup, live) = trees();
    let (b, l) = (backup.path(), live.path());
    write(b, "d/same", b"0123456789");
    write(b, "d/rotted", b"0123456789");
    let stamp = FileTime::from_unix_time(1_700_000_000, 0);
    for root in [b, l] {
        if root == l {
            write(l, "d/same", b"0123456789");
            write(l, "d/rotted", b"0123X56789");
        }
        for name in ["same", "rotted"] {
            filetime::set_file_times(root.join("d").join(name), stamp, stamp).unwrap();
        }
    }
    let before = fs::metadata(l.join("d/same")).unwrap().ino();
    let summary = copy(b, l, &selection(&["d/*"], &[]), false).unwrap();
    assert_eq!(
        fs::metadata(l.join("d/same")).unwrap().ino(),
        before,
        "not rewritten"
    );
    assert_eq!(read(l, "d/rotted"), b"0123456789");
    assert_eq!(
        (summary.counts.unchanged, summary.counts.files_written),
        (1, 1),
        "{summary:?}"
    );
}

#[test]
fn mirror_deletes_only_under_chosen_paths_and_never_what_is_excluded() {
    let (backup, live) = trees();
    let (b, l) = (backup.path(), live.path());
    write(b, "db/a", b"a");
    write(l, "db/a", b"a");
    write(l, "db/stray", b"not in the backup");
    write(l, "db/straydir/x", b"nor this");
    write(l, "db/keep/x", b"excluded");
    write(l, "other/stray", b"outside the paths");
    write(
        l,
        "db/straydir2/cache/x",
        b"excluded below a stray directory",
    );

    let (include, exclude) = (["db"], ["db/keep", "**/cache"]);
    let without = copy(b, l, &selection(&include, &exclude), false).unwrap();
    assert_eq!(without.counts.deleted, 0);
    assert!(l.join("db/stray").exists(), "only mirror deletes");

    let summary = copy(b, l, &selection(&include, &exclude), true).unwrap();
    assert!(!l.join("db/stray").exists());
    assert!(!l.join("db/straydir").exists());
    assert!(l.join("db/keep/x").exists(), "excluded");
    assert!(l.join("other/stray").exists(), "outside the chosen paths");
    assert!(
        l.join("db/straydir2/cache/x").exists(),
        "excluded, though under a directory the backup lacks"
    );
    assert!(summary.counts.deleted >= 2, "{summary:?}");
}

#[test]
fn a_symlink_in_the_live_tree_is_replaced_never_written_through() {
    let (backup, live) = trees();
    let outside = tempfile::tempdir().unwrap();
    let (b, l) = (backup.path(), live.path());
    write(b, "conf/app.yaml", b"from the backup");
    symlink(outside.path(), l.join("conf")).unwrap();

    copy(b, l, &selection(&["conf/app.yaml"], &[]), false).unwrap();
    assert!(fs::symlink_metadata(l.join("conf")).unwrap().is_dir());
    assert_eq!(read(l, "conf/app.yaml"), b"from the backup");
    assert_eq!(
        fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing written outside the volume"
    );
}

#[test]
fn a_report_fits_a_termination_log() {
    let summary = Summary {
        skipped: (0..500).map(|i| format!("dev/fifo-{i}")).collect(),
        counts: crate::api::CopySummary {
            skipped_count: 500,
            ..Default::default()
        },
    };
    let report = report(&summary);
    assert!(report.len() < 4096, "{}", report.len());
    let back: Summary = serde_json::from_str(&report).unwrap();
    assert_eq!(
        (back.skipped.len(), back.counts.skipped_count),
        (REPORT_LIMIT, 500)
    );
}

#[test]
fn a_live_file_linked_elsewhere_is_made_anew_and_unchosen_directories_are_left() {
    let (backup, live) = trees();
    let (b, l) = (backup.path(), live.path());
    write(b, "db/a", b"same");
    write(l, "db/a", b"same");
    let stamp = FileTime::from_unix_time(1_700_000_000, 0);
    filetime::set_file_times(b.join("db/a"), stamp, stamp).unwrap();
    filetime::set_file_times(l.join("db/a"), stamp, stamp).unwrap();
    fs::hard_link(l.join("db/a"), l.join("elsewhere")).unwrap();
    // Nothing under web/ is chosen: the live symlink there stays, and no empty
    // directories of the snapshot appear.
    write(b, "web/static/x.css", b"css");
    fs::create_dir_all(b.join("deep/er/still")).unwrap();
    symlink("/srv/web", l.join("web")).unwrap();

    copy(b, l, &selection(&["db", "**/x.log"], &[]), false).unwrap();
    fs::write(l.join("elsewhere"), b"changed through the other name").unwrap();
    assert_eq!(read(l, "db/a"), b"same", "still linked to the other name");
    assert!(
        fs::symlink_metadata(l.join("web"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        !l.join("deep").exists(),
        "a skeleton of the snapshot was made"
    );
}
