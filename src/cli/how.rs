//! How a restore puts the files back, in words: its method (what the app goes through)
//! and what becomes of the files the backup lacks. `--dry-run`, `restore describe` and
//! `schedule describe` say it the same way.

use crate::api::{DataRestoreSpec, ExtraFiles, PathRestore, RestoreMethod, RestoreTarget};

/// spec.method: how each volume is filled and how long the app is down for it.
pub(super) fn method(spec: &DataRestoreSpec) -> String {
    if spec.target == RestoreTarget::NewClaim {
        return "Direct, into new claims — the node agent writes the backup into a new claim beside each PVC; nothing is stopped".into();
    }
    let running = spec.writes_under_running_consumers();
    let words = match (&spec.paths, spec.method) {
        (Some(_), _) => format!(
            "Staged, as every path restore — the node agent fills a scratch claim beside each PVC while the app runs; {}",
            downtime(running, "the chosen paths are copied from it")
        ),
        (None, RestoreMethod::Staged) => format!(
            "Staged — the node agent fills a scratch claim beside each PVC while the app runs (room for a second copy of each volume until the restore ends); {}, and what the app writes during the fill is discarded",
            downtime(running, "the difference is copied")
        ),
        (None, RestoreMethod::Direct) if running => {
            "Direct — the node agent writes the backup into each PVC while the app keeps running (consumers None)".into()
        }
        (None, RestoreMethod::Direct) => {
            "Direct — the app stops, then the node agent writes the backup into each PVC: it is down for the whole restore".into()
        }
    };
    match own_paths(spec) {
        true => {
            words
                + "; a PVC with paths of its own (pvcPaths) is always filled through a scratch claim"
        }
        false => words,
    }
}

/// When the app is down while a scratch claim's content is copied into the PVC.
fn downtime(running: bool, copy: &str) -> String {
    match running {
        true => format!("then {copy} while the app keeps running (consumers None)"),
        false => format!("the app stops only while {copy}"),
    }
}

/// spec.extraFiles: what becomes of what a PVC holds and the backup does not.
pub(super) fn extra_files(spec: &DataRestoreSpec) -> String {
    if spec.target == RestoreTarget::NewClaim {
        return "none — a new claim holds only the backup".into();
    }
    if let Some(paths) = &spec.paths {
        return mirror(paths);
    }
    let words = match (spec.extra_files, spec.keeps_extra_files()) {
        (ExtraFiles::Keep, _) => "kept (the backup is merged over what is there)",
        (ExtraFiles::Delete, true) => {
            "kept: a volume is not emptied under an app that keeps running (consumers None); method Staged removes them"
        }
        (ExtraFiles::Delete, false) => "deleted (each volume will hold exactly the backup)",
    };
    match own_paths(spec) {
        true => format!("{words}; a PVC with paths of its own (pvcPaths) follows its paths.mirror"),
        false => words.into(),
    }
}

/// A path restore deletes only under its paths, and only with `mirror`.
fn mirror(paths: &PathRestore) -> String {
    let under = match paths.mirror {
        true => "deleted under the chosen paths",
        false => "kept (off)",
    };
    format!("follow paths.mirror: {under}; the rest of each volume is left as it is")
}

/// Some PVCs, but not all, are path restores.
fn own_paths(spec: &DataRestoreSpec) -> bool {
    spec.paths.is_none() && !spec.pvc_paths.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ConsumerPolicy;

    fn spec(method: RestoreMethod, extra_files: ExtraFiles) -> DataRestoreSpec {
        DataRestoreSpec {
            method,
            extra_files,
            ..Default::default()
        }
    }

    fn db_only(mirror: bool) -> Option<PathRestore> {
        Some(PathRestore {
            include: vec!["db".into()],
            exclude: vec![],
            mirror,
        })
    }

    #[test]
    fn whole_volumes_say_how_long_the_app_is_down_and_what_is_deleted() {
        let direct = spec(RestoreMethod::Direct, ExtraFiles::Delete);
        assert_eq!(
            method(&direct),
            "Direct — the app stops, then the node agent writes the backup into each PVC: it is down for the whole restore"
        );
        assert_eq!(
            extra_files(&direct),
            "deleted (each volume will hold exactly the backup)"
        );
        let staged = spec(RestoreMethod::Staged, ExtraFiles::Keep);
        assert_eq!(
            method(&staged),
            "Staged — the node agent fills a scratch claim beside each PVC while the app runs (room for a second copy of each volume until the restore ends); the app stops only while the difference is copied, and what the app writes during the fill is discarded"
        );
        assert_eq!(
            extra_files(&staged),
            "kept (the backup is merged over what is there)"
        );
    }

    #[test]
    fn under_running_consumers_nothing_is_said_to_stop() {
        for chosen in [RestoreMethod::Direct, RestoreMethod::Staged] {
            let online = DataRestoreSpec {
                consumers: ConsumerPolicy::None,
                ..spec(chosen, ExtraFiles::Delete)
            };
            let words = method(&online);
            assert!(
                words.contains("while the app keeps running (consumers None)")
                    && !words.contains("stops"),
                "{words}"
            );
            // A direct restore does not empty a volume under a running app; a staged
            // one removes extra files with its copy.
            let extra = extra_files(&online);
            match chosen {
                RestoreMethod::Direct => assert!(
                    extra.starts_with(
                        "kept: a volume is not emptied under an app that keeps running"
                    ),
                    "{extra}"
                ),
                RestoreMethod::Staged => assert!(extra.starts_with("deleted ("), "{extra}"),
            }
        }
    }

    #[test]
    fn path_restores_are_staged_and_follow_their_mirror() {
        for mirrored in [true, false] {
            let paths = DataRestoreSpec {
                paths: db_only(mirrored),
                ..spec(RestoreMethod::Direct, ExtraFiles::Delete)
            };
            assert_eq!(
                method(&paths),
                "Staged, as every path restore — the node agent fills a scratch claim beside each PVC while the app runs; the app stops only while the chosen paths are copied from it"
            );
            let under = if mirrored {
                "deleted under the chosen paths"
            } else {
                "kept (off)"
            };
            assert_eq!(
                extra_files(&paths),
                format!("follow paths.mirror: {under}; the rest of each volume is left as it is")
            );
        }
        let some = DataRestoreSpec {
            pvc_paths: [("shop/logs".to_string(), db_only(true).unwrap())].into(),
            ..spec(RestoreMethod::Direct, ExtraFiles::Delete)
        };
        assert!(
            method(&some).ends_with(
                "; a PVC with paths of its own (pvcPaths) is always filled through a scratch claim"
            ),
            "{}",
            method(&some)
        );
        assert!(
            extra_files(&some).starts_with("deleted (")
                && extra_files(&some).ends_with("follows its paths.mirror"),
            "{}",
            extra_files(&some)
        );
    }

    #[test]
    fn new_claims_stop_nothing_and_hold_only_the_backup() {
        let new_claim = DataRestoreSpec {
            target: RestoreTarget::NewClaim,
            ..Default::default()
        };
        assert!(method(&new_claim).ends_with("; nothing is stopped"));
        assert_eq!(
            extra_files(&new_claim),
            "none — a new claim holds only the backup"
        );
    }
}
