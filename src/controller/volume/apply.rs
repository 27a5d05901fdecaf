//! Writes a decided [`Change`] into the volume's record, and says what to tell people
//! about it. Pure.

use k8s_openapi::jiff::Timestamp;

use crate::api::{VolumePhase, VolumeStatus};

use super::decide::{Change, node};
use crate::controller::reasons;
use crate::controller::status::stored;

/// What a put-back adds to the reason a volume stopped.
const PUT_BACK: &str = "; the volume's files were put back as they were";

/// An Event to publish about the volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub text: String,
}

/// What applying a change produced besides the record itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    pub note: Option<Note>,
    /// A line for `status.errors`.
    pub error: Option<String>,
}

const PARTLY_WRITTEN: &str = "the node agent may have written part of the backup before it stopped, so the volume may hold a mix of old and restored files; restore it again to get the backup's files";
const PATHS_PARTLY_WRITTEN: &str = "the copier may have written part of the chosen paths before it stopped, so they may hold a mix of old and restored files; restore them again to get the backup's files";
const STAGED_PARTLY_WRITTEN: &str = "the copier may have written part of the backup from the scratch claim before it stopped, so the volume may hold a mix of old and restored files; restore it again to get the backup's files";
const CLEARED_PARTLY_WRITTEN: &str = "the volume's files were set aside to put the backup in their place, and were not all put back: restore it again to get the backup's files";

/// Who may have left a volume half written, which says what it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writer {
    /// Velero's node agent, over the old files.
    NodeAgent,
    /// refill's copier, over the chosen paths.
    PathCopier,
    /// refill's copier, from a staged restore's scratch claim.
    StagedCopier,
    /// refill's copier set the volume's files aside, then maybe the node agent wrote.
    Cleared,
}

impl Writer {
    /// The writer of `volume`, from how it is restored.
    pub(crate) fn of(volume: &VolumeStatus) -> Writer {
        if volume.paths.is_some() {
            Writer::PathCopier
        } else if volume.fills_scratch_first() {
            Writer::StagedCopier
        } else if volume.clears_first() {
            Writer::Cleared
        } else {
            Writer::NodeAgent
        }
    }
}

/// The message of a volume that ended, with the plain warning when it may be half
/// written by `writer`.
pub(crate) fn ending_message(message: &str, partly_written: bool, writer: Writer) -> String {
    if !partly_written {
        return message.to_string();
    }
    let what = match writer {
        Writer::NodeAgent => PARTLY_WRITTEN,
        Writer::PathCopier => PATHS_PARTLY_WRITTEN,
        Writer::StagedCopier => STAGED_PARTLY_WRITTEN,
        Writer::Cleared => CLEARED_PARTLY_WRITTEN,
    };
    format!("{message}; {what}")
}

pub(crate) fn apply(volume: &mut VolumeStatus, change: Change, now: Timestamp) -> Applied {
    let pvc = volume.pvc.clone();
    let mut applied = Applied::default();
    match change {
        Change::Stay { message, warning } => {
            if warning.is_some() && volume.warning != warning {
                applied.note = warning.clone().map(|text| Note {
                    warning: true,
                    reason: reasons::VOLUME_WAITING,
                    text: format!("{pvc}: {text}"),
                });
            }
            volume.message = message;
            volume.warning = warning;
        }
        Change::Advance(phase) => {
            // A stand-in that tidies goes from the node agent's end straight to its tidy.
            if phase == VolumePhase::Tidying {
                volume.bytes_done = volume.total_bytes.max(volume.bytes_done);
            }
            volume.phase = phase;
            volume.message = None;
            volume.warning = None;
        }
        Change::Cleared(summary) => {
            volume.phase = VolumePhase::StartingStandIn;
            volume.message = Some(format!(
                "emptied ({} set aside); waiting for restore-wait",
                entries(summary.deleted)
            ));
            volume.warning = None;
            volume.cleared = Some(summary.deleted);
        }
        // Recorded on a pass of its own, the volume completing on the next: the pass
        // that completes the last volume also brings the consumers back, and if its
        // status write is lost a restarted refill must still find the tidy over, or
        // it takes the returning consumers for someone else's restart.
        Change::Tidied(summary) => {
            volume.tidied = Some(summary.deleted);
            volume.message = Some(format!(
                "removed the {} set aside; removing the stand-in pod",
                entries(summary.deleted)
            ));
            volume.warning = None;
        }
        Change::DataIn { message } => {
            volume.phase = VolumePhase::RemovingStandIn;
            volume.bytes_done = volume.total_bytes.max(volume.bytes_done);
            volume.message = message;
            volume.warning = None;
        }
        Change::Copied(summary) if volume.phase == VolumePhase::Clearing => {
            volume.message = Some(format!(
                "emptied ({} set aside); removing the copier pod",
                entries(summary.deleted)
            ));
            volume.warning = None;
            volume.cleared = Some(summary.deleted);
        }
        Change::Copied(summary) if volume.phase == VolumePhase::Tidying => {
            volume.message = Some(format!(
                "removed what was set aside ({}); removing the copier pod",
                entries(summary.deleted)
            ));
            volume.warning = None;
            volume.tidied = Some(summary.deleted);
        }
        // Aborting: the files set aside are back; the reason it stopped stays the message.
        // Only the reason: a note of a node it waited on is over now, and a put-back seen
        // again on a later pass must not say so twice.
        Change::Copied(summary) if volume.phase == VolumePhase::Aborting => {
            let message = node::noted(volume.message.take(), None).unwrap_or_default();
            let reason = message.split(PUT_BACK).next().unwrap_or_default();
            volume.message = Some(format!(
                "{reason}{PUT_BACK} ({} put back, {} written meanwhile deleted)",
                entries(summary.unchanged),
                entries(summary.deleted)
            ));
            volume.put_back = Some(summary.unchanged);
        }
        Change::Copied(summary) => {
            volume.message = Some(format!(
                "copied: {}; removing the copier pod",
                summary.line()
            ));
            volume.warning = None;
            volume.copied = Some(summary);
        }
        Change::Completed => {
            volume.phase = VolumePhase::Completed;
            volume.bytes_done = volume.total_bytes.max(volume.bytes_done);
            let copied = volume.copied.as_ref().map(|c| c.line());
            let what = if volume.paths.is_some() {
                "chosen paths restored"
            } else {
                "restored from the scratch claim"
            };
            let (message, text) = match (&volume.target_pvc, copied) {
                (_, Some(copied)) => (
                    format!("{what}: {copied}"),
                    format!("{pvc}: {what}: {copied}"),
                ),
                (Some(_), None) => {
                    let into = volume.written_claim();
                    (
                        format!("restored into PVC {into}"),
                        format!("{pvc} restored into PVC {into}"),
                    )
                }
                (None, None) => match volume.cleared {
                    Some(n) => (
                        format!(
                            "restored into the emptied volume ({} set aside first, then removed)",
                            entries(n)
                        ),
                        format!("{pvc} restored"),
                    ),
                    None => ("restored".to_string(), format!("{pvc} restored")),
                },
            };
            volume.message = Some(message);
            volume.warning = None;
            volume.completion_time = Some(stored(now));
            applied.note = Some(Note {
                warning: false,
                reason: reasons::VOLUME_RESTORED,
                text,
            });
        }
        Change::Abort { outcome, message } => {
            // The copier writes the PVC itself: whatever it did so far stays. (A set-aside
            // is put back before the volume ends.)
            volume.partly_written |= volume.phase == VolumePhase::Copying;
            volume.phase = VolumePhase::Aborting;
            volume.outcome = Some(outcome);
            volume.abort_time = Some(stored(now));
            volume.warning = None;
            applied.note = Some(Note {
                warning: outcome == VolumePhase::Failed,
                reason: reasons::VOLUME_ABORTING,
                text: format!(
                    "{pvc}: {message}; stopping the node agent before its consumers come back"
                ),
            });
            volume.message = Some(message);
        }
        Change::End { outcome, message } => {
            end(volume, outcome, &message, false, now, &mut applied);
        }
        Change::Finish { partly_written } => {
            let outcome = volume.outcome.unwrap_or(VolumePhase::Failed);
            let message = volume
                .message
                .clone()
                .unwrap_or_else(|| format!("{outcome:?}"));
            end(volume, outcome, &message, partly_written, now, &mut applied);
        }
    }
    applied
}

/// `3 entries`, `1 entry`.
fn entries(n: u64) -> String {
    if n == 1 {
        "1 entry".into()
    } else {
        format!("{n} entries")
    }
}

fn end(
    volume: &mut VolumeStatus,
    outcome: VolumePhase,
    message: &str,
    partly_written: bool,
    now: Timestamp,
    applied: &mut Applied,
) {
    let pvc = volume.pvc.clone();
    // A volume whose files were set aside and that ends from Aborting without them
    // put back is not as it was, whatever ended it.
    let not_put_back =
        volume.clears_first() && volume.phase == VolumePhase::Aborting && volume.put_back.is_none();
    let partly_written = partly_written || not_put_back;
    let message = ending_message(message, partly_written, Writer::of(volume));
    volume.phase = outcome;
    volume.partly_written = partly_written;
    volume.warning = None;
    volume.completion_time = Some(stored(now));
    let (warning, reason) = match outcome {
        VolumePhase::Canceled => (false, reasons::VOLUME_CANCELED),
        _ => (true, reasons::VOLUME_FAILED),
    };
    if outcome == VolumePhase::Failed {
        applied.error = Some(format!("{pvc}: {message}"));
    }
    applied.note = Some(Note {
        warning,
        reason,
        text: format!("{pvc}: {message}"),
    });
    volume.message = Some(message);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(phase: VolumePhase) -> VolumeStatus {
        VolumeStatus {
            pvc: "shop/data".into(),
            phase,
            total_bytes: 10,
            bytes_done: 4,
            keep_extra_files: true,
            ..Default::default()
        }
    }

    #[test]
    fn data_in_shows_every_byte_written_and_what_the_volume_waits_for() {
        let now = Timestamp::from_second(100).unwrap();
        let mut v = volume(VolumePhase::Restoring);
        v.warning = Some("slow".into());
        let applied = apply(
            &mut v,
            Change::DataIn {
                message: Some("restored; removing the stand-in pod".into()),
            },
            now,
        );
        assert_eq!(v.phase, VolumePhase::RemovingStandIn);
        assert_eq!((v.bytes_done, v.total_bytes), (10, 10));
        assert_eq!(
            v.message.as_deref(),
            Some("restored; removing the stand-in pod")
        );
        assert!(v.warning.is_none() && v.completion_time.is_none());
        assert_eq!(
            applied,
            Applied::default(),
            "no event: the volume has not ended"
        );
    }

    #[test]
    fn a_direct_restore_whose_files_were_put_back_ends_as_it_was_and_one_not_put_back_says_so() {
        use crate::api::CopySummary;
        let now = Timestamp::from_second(100).unwrap();
        let set_aside = VolumeStatus {
            keep_extra_files: false,
            cleared: Some(9),
            outcome: Some(VolumePhase::Canceled),
            message: Some("the restore was canceled".into()),
            ..volume(VolumePhase::Aborting)
        };
        let mut back = set_aside.clone();
        let summary = CopySummary {
            unchanged: 9,
            deleted: 4,
            ..Default::default()
        };
        back.message = Some(
            "the restore was canceled; waiting on node n1 (NotReady (KubeletNotReady))".into(),
        );
        apply(&mut back, Change::Copied(summary.clone()), now);
        // The copier's result read again on the next pass.
        apply(&mut back, Change::Copied(summary), now);
        assert_eq!(back.put_back, Some(9));
        apply(
            &mut back,
            Change::Finish {
                partly_written: false,
            },
            now,
        );
        assert_eq!(back.phase, VolumePhase::Canceled);
        assert!(!back.partly_written);
        let message = back.message.unwrap();
        assert_eq!(
            message,
            "the restore was canceled; the volume's files were put back as they were \
             (9 entries put back, 4 entries written meanwhile deleted)",
            "once, and without the node note that is over"
        );

        let mut lost = set_aside;
        apply(
            &mut lost,
            Change::End {
                outcome: VolumePhase::Failed,
                message: "putting its files back failed".into(),
            },
            now,
        );
        assert!(lost.partly_written, "not put back: not as it was");
        assert!(
            lost.message.unwrap().contains("were not all put back"),
            "the plain warning follows"
        );
    }

    #[test]
    fn an_abort_keeps_the_outcome_for_later_and_a_finish_ends_with_it() {
        let now = Timestamp::from_second(100).unwrap();
        let mut v = volume(VolumePhase::Restoring);
        let applied = apply(
            &mut v,
            Change::Abort {
                outcome: VolumePhase::Canceled,
                message: "the restore was canceled".into(),
            },
            now,
        );
        assert_eq!(v.phase, VolumePhase::Aborting);
        assert_eq!(v.outcome, Some(VolumePhase::Canceled));
        assert!(v.completion_time.is_none(), "not ended yet");
        assert!(!applied.note.unwrap().warning, "a cancel is no warning");

        let applied = apply(
            &mut v,
            Change::Finish {
                partly_written: true,
            },
            now,
        );
        assert_eq!(v.phase, VolumePhase::Canceled);
        assert!(v.partly_written);
        let message = v.message.clone().unwrap();
        assert!(
            message.starts_with("the restore was canceled; the node agent may have written part"),
            "{message}"
        );
        assert!(applied.error.is_none(), "a cancel is not an error");
        assert_eq!(applied.note.unwrap().reason, reasons::VOLUME_CANCELED);
    }

    #[test]
    fn a_failure_is_an_error_of_the_restore_and_says_which_volume() {
        let mut v = volume(VolumePhase::Quiescing);
        let applied = apply(
            &mut v,
            Change::End {
                outcome: VolumePhase::Failed,
                message: "PVC shop/data was deleted during the restore".into(),
            },
            Timestamp::from_second(1).unwrap(),
        );
        assert_eq!(v.phase, VolumePhase::Failed);
        assert!(!v.partly_written);
        assert_eq!(
            applied.error.as_deref(),
            Some("shop/data: PVC shop/data was deleted during the restore")
        );
    }

    #[test]
    fn a_warning_is_announced_once() {
        let mut v = volume(VolumePhase::Restoring);
        let change = || Change::Stay {
            message: Some("waiting".into()),
            warning: Some("no node agent".into()),
        };
        let now = Timestamp::from_second(1).unwrap();
        assert!(apply(&mut v, change(), now).note.is_some());
        assert!(apply(&mut v, change(), now).note.is_none());
        assert_eq!(v.warning.as_deref(), Some("no node agent"));
    }

    #[test]
    fn a_copy_reports_what_it_did_and_a_stopped_one_says_its_paths_may_be_mixed() {
        let now = Timestamp::from_second(1).unwrap();
        let paths = VolumeStatus {
            paths: Some(crate::api::PathRestore {
                include: vec!["db".into()],
                ..Default::default()
            }),
            ..volume(VolumePhase::Copying)
        };
        let mut done = paths.clone();
        let summary = crate::api::CopySummary {
            files_written: 3,
            bytes_written: 10,
            ..Default::default()
        };
        apply(&mut done, Change::Copied(summary.clone()), now);
        assert_eq!(done.copied, Some(summary));
        let applied = apply(&mut done, Change::Completed, now);
        assert_eq!(
            done.message.as_deref(),
            Some("chosen paths restored: 3 files written (10 B)")
        );
        assert!(applied.note.unwrap().text.contains("chosen paths restored"));

        let mut stopped = paths;
        let abort = Change::Abort {
            outcome: VolumePhase::Failed,
            message: "copier pod c failed: disk full".into(),
        };
        apply(&mut stopped, abort, now);
        assert!(
            stopped.partly_written,
            "the copier may have written some paths"
        );
        apply(
            &mut stopped,
            Change::Finish {
                partly_written: true,
            },
            now,
        );
        let message = stopped.message.unwrap();
        assert!(
            message.contains("the copier may have written part of the chosen paths"),
            "{message}"
        );
    }

    #[test]
    fn a_tidy_is_recorded_before_the_volume_completes() {
        use crate::api::CopySummary;
        let mut v = volume(VolumePhase::Tidying);
        let applied = apply(
            &mut v,
            Change::Tidied(CopySummary {
                deleted: 3,
                ..Default::default()
            }),
            Timestamp::from_second(1).unwrap(),
        );
        // Completing in the same pass would let that pass bring the consumers back
        // with the tidy not yet durable.
        assert_eq!((v.phase, v.tidied), (VolumePhase::Tidying, Some(3)));
        assert!(v.completion_time.is_none());
        assert_eq!(applied, Applied::default());
    }

    #[test]
    fn completing_fills_the_progress() {
        let mut v = volume(VolumePhase::Restoring);
        apply(
            &mut v,
            Change::Completed,
            Timestamp::from_second(1).unwrap(),
        );
        assert_eq!((v.phase, v.bytes_done), (VolumePhase::Completed, 10));
    }
}
