//! The copier pod: refill's own image running `refill copy` against the PVC, which
//! reports what it did in its termination message. It copies the chosen paths of a
//! path restore, or the whole of a staged one, from the scratch claim (the whole
//! snapshot, mounted read-only); or, before a direct restore, it empties the PVC.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerStateTerminated, PersistentVolumeClaimVolumeSource, Pod,
    PodSpec, ResourceRequirements, SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::{CopySummary, PathRestore};
use crate::controller::build::stand_in::{candidate_affinity, own_pod_metadata, unscheduled};
use crate::labels;

/// The copier's container, whose termination message is read.
pub const CONTAINER: &str = "copy";
const SOURCE: &str = "/source";
const TARGET: &str = "/target";
const TERMINATION_LOG: &str = "/dev/termination-log";

/// The copier's only capabilities (all others dropped). It runs as root, but the
/// snapshot's and the volume's files belong to the app's users, with their modes:
const CAPABILITIES: [&str; 4] = [
    // Give each file and directory the owner and group the backup recorded.
    "CHOWN",
    // Read, write and search files and directories whatever their modes say (0700
    // directories and 0600 files of another user, on both claims). This includes
    // reading and searching: DAC_READ_SEARCH would add nothing but open_by_handle_at,
    // which opens any file of a mounted file system by its handle, outside the mounts
    // the pod sees (a known container escape), so it is not given.
    "DAC_OVERRIDE",
    // Act as the owner of files root does not own: set the mode, times and extended
    // attributes once chown handed the file to its owner, hard-link it (the kernel's
    // protected_hardlinks refuses links to others' files), remove entries from
    // another user's sticky directory.
    "FOWNER",
    // Keep the set-group-ID bit when setting the mode of a file whose group is not
    // root's (chmod drops it silently otherwise).
    "FSETID",
];

/// What the copier does to the PVC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job<'a> {
    /// Copies the chosen paths of the scratch claim.
    Paths(&'a PathRestore),
    /// Makes the PVC hold what the scratch claim holds; with `mirror`, nothing more.
    Whole {
        /// Also remove what the scratch claim does not hold.
        mirror: bool,
    },
    /// Moves the PVC's files into the directory named, in its root, before the node
    /// agent writes the backup beside them.
    SetAside(&'a str),
    /// Removes that directory once the backup is in.
    Tidy(&'a str),
    /// Moves the set-aside files back: the backup did not go in whole. With
    /// `delete_written`, what the node agent may have written goes first.
    PutBack {
        /// The set-aside directory, in the PVC's root.
        dir: &'a str,
        /// Delete what is beside it first.
        delete_written: bool,
    },
}

impl Job<'_> {
    /// The flag and directory of a job that moves the PVC's own files.
    fn moves(&self) -> Option<(&'static str, &str)> {
        match *self {
            Job::SetAside(name) => Some(("--set-aside", name)),
            Job::Tidy(name) => Some(("--tidy", name)),
            Job::PutBack { dir, .. } => Some(("--put-back", dir)),
            Job::Paths(_) | Job::Whole { .. } => None,
        }
    }
}

/// The directory of a PVC's root where a direct restore sets its files aside: named
/// for the restore, so that no backup holds it and no other restore's is taken for it.
pub fn aside_dir(restore_uid: &str) -> String {
    format!(".refill-aside-{restore_uid}")
}

/// Velero's folder in a volume's root, where the node agent writes its done file for
/// `restore-wait`: neither copied, removed nor cleared.
const VELERO_FOLDER: &str = ".velero";

/// What a copier pod is made of.
pub struct Copier<'a> {
    /// The pod's name, derived from the PVC.
    pub name: String,
    /// The PVC's namespace.
    pub namespace: &'a str,
    /// The scratch claim, holding the whole snapshot (none to clear).
    pub source_claim: Option<&'a str>,
    /// The PVC written.
    pub target_claim: &'a str,
    /// `namespace/name` of the DataRestore.
    pub restore_key: String,
    /// The DataRestore's UID, in the pod's labels.
    pub restore_uid: &'a str,
    /// Where it may run: the scratch claim's node (the stand-in's), or an unbound
    /// claim's candidate nodes; none where the claim's volume decides.
    pub nodes: &'a [String],
    /// The consumer's tolerations: the volume may be on a tainted node.
    pub tolerations: &'a [Toleration],
    /// refill's own image.
    pub image: &'a str,
    /// What it does.
    pub job: Job<'a>,
}

/// `refill copy`'s arguments for `job`.
pub fn args(job: Job<'_>) -> Vec<String> {
    let from = ["copy", "--from", SOURCE, "--to", TARGET];
    let mut args: Vec<String> = match job.moves() {
        Some((flag, name)) => ["copy", flag, name, "--to", TARGET]
            .map(String::from)
            .to_vec(),
        None => from.map(String::from).to_vec(),
    };
    let mut flag = |name: &str, value: &str| args.extend([name.to_string(), value.to_string()]);
    let mirror = match job {
        Job::Paths(paths) => {
            for include in &paths.include {
                flag("--include", include);
            }
            for exclude in &paths.exclude {
                flag("--exclude", exclude);
            }
            paths.mirror
        }
        Job::Whole { mirror } => {
            args.push("--whole".into());
            mirror
        }
        Job::PutBack {
            delete_written: true,
            ..
        } => {
            args.push("--delete-written".into());
            false
        }
        Job::SetAside(_) | Job::Tidy(_) | Job::PutBack { .. } => false,
    };
    if matches!(
        job,
        Job::Whole { .. } | Job::SetAside(_) | Job::PutBack { .. }
    ) {
        args.extend(["--exclude".to_string(), VELERO_FOLDER.to_string()]);
    }
    if mirror {
        args.push("--mirror".into());
    }
    args.extend(["--termination-log".to_string(), TERMINATION_LOG.to_string()]);
    args
}

fn claim_volume(name: &str, claim: &str, read_only: bool) -> Volume {
    Volume {
        name: name.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.to_string(),
            read_only: Some(read_only),
        }),
        ..Default::default()
    }
}

/// What the copier asks for: a namespace whose quota wants requests of every
/// container admits it. Memory is small and flat (a buffer per thread, the hard links
/// seen); no CPU limit, so that a large volume's compare uses what the node has spare.
fn resources() -> ResourceRequirements {
    let quantity = |q: &str| Quantity(q.to_string());
    ResourceRequirements {
        requests: Some(
            [
                ("cpu".to_string(), quantity("100m")),
                ("memory".to_string(), quantity("64Mi")),
            ]
            .into(),
        ),
        limits: Some([("memory".to_string(), quantity("512Mi"))].into()),
        ..Default::default()
    }
}

/// Root with only the capabilities that owners, modes and times of other users' files
/// need (CAPABILITIES says why each): the files get the owners the backup recorded,
/// whoever they are.
fn security() -> SecurityContext {
    SecurityContext {
        run_as_user: Some(0),
        run_as_group: Some(0),
        run_as_non_root: Some(false),
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: Some(CAPABILITIES.map(String::from).to_vec()),
        }),
        ..Default::default()
    }
}

/// A container running `refill copy` with `args`, as root with only its capabilities.
fn container(name: &str, image: &str, args: Vec<String>, mounts: Vec<VolumeMount>) -> Container {
    Container {
        name: name.into(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(args),
        resources: Some(resources()),
        volume_mounts: Some(mounts),
        security_context: Some(security()),
        ..Default::default()
    }
}

/// The stand-in's init container that sets the volume's files aside before
/// `restore-wait`, in a whole-volume restore that deletes extra files.
pub const SET_ASIDE_CONTAINER: &str = "set-aside";
/// The stand-in's container that removes them once `restore-wait` has exited.
pub const TIDY_CONTAINER: &str = "tidy";
/// The stand-in's own emptyDir, where the set-aside records that it completed.
pub(crate) const STATE_VOLUME: &str = "refill-state";
const STATE: &str = "/refill-state";

/// The set-aside and tidy containers of a stand-in that mounts the claim as the pod
/// volume `volume`: the first runs once (its record in the pod's emptyDir, which a
/// sandbox made anew keeps), so that it never sets the backup aside.
pub fn in_stand_in(image: &str, volume: &str, aside: &str) -> (Container, Container) {
    let target = VolumeMount {
        name: volume.into(),
        mount_path: TARGET.into(),
        ..Default::default()
    };
    let state = VolumeMount {
        name: STATE_VOLUME.into(),
        mount_path: STATE.into(),
        ..Default::default()
    };
    let mut set_aside = args(Job::SetAside(aside));
    set_aside.extend(["--once".to_string(), format!("{STATE}/set-aside")]);
    (
        container(
            SET_ASIDE_CONTAINER,
            image,
            set_aside,
            vec![target.clone(), state],
        ),
        container(TIDY_CONTAINER, image, args(Job::Tidy(aside)), vec![target]),
    )
}

/// The copier pod: root with only the capabilities its job needs, on the nodes given.
pub fn pod(c: Copier<'_>) -> Pod {
    let mut mounts = vec![VolumeMount {
        name: "target".into(),
        mount_path: TARGET.into(),
        ..Default::default()
    }];
    let mut volumes = vec![claim_volume("target", c.target_claim, false)];
    if let Some(source) = c.source_claim {
        mounts.push(VolumeMount {
            name: "source".into(),
            mount_path: SOURCE.into(),
            read_only: Some(true),
            ..Default::default()
        });
        volumes.push(claim_volume("source", source, true));
    }
    Pod {
        metadata: own_pod_metadata(
            c.name,
            c.namespace,
            labels::ROLE_COPIER,
            c.restore_uid,
            c.restore_key,
        ),
        spec: Some(PodSpec {
            containers: vec![container(CONTAINER, c.image, args(c.job), mounts)],
            volumes: Some(volumes),
            affinity: candidate_affinity(c.nodes),
            tolerations: (!c.tolerations.is_empty()).then(|| c.tolerations.to_vec()),
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(5),
            automount_service_account_token: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// How the copier ended, from its pod: None while it runs, its summary, or why it
/// failed in its own words.
pub fn outcome(pod: &Pod) -> Option<Result<CopySummary, String>> {
    let status = pod.status.as_ref()?;
    let terminated = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == CONTAINER)
        .and_then(|c| c.state.as_ref()?.terminated.as_ref());
    let Some(terminated) = terminated else {
        // Ended without its container ever running (evicted, its node lost).
        return (status.phase.as_deref() == Some("Failed")).then(|| {
            Err(status
                .message
                .clone()
                .or(status.reason.clone())
                .unwrap_or_else(|| "the pod failed".into()))
        });
    };
    Some(ended(terminated))
}

/// A `refill copy` container's end: its summary, or why it failed in its own words.
pub fn ended(terminated: &ContainerStateTerminated) -> Result<CopySummary, String> {
    let message = terminated.message.as_deref().unwrap_or_default();
    if terminated.exit_code == 0 {
        return serde_json::from_str(message)
            .map_err(|e| format!("its report could not be read ({e}): {message:?}"));
    }
    #[derive(serde::Deserialize)]
    struct Report {
        error: String,
    }
    let why = serde_json::from_str::<Report>(message)
        .map(|r| r.error)
        .unwrap_or_else(|_| match &terminated.reason {
            Some(reason) => format!("exit code {} ({reason}) {message}", terminated.exit_code),
            None => format!("exit code {} {message}", terminated.exit_code),
        });
    Err(why.trim().to_string())
}

/// Whether the kubelet refused the copier `pod` before starting its container (node
/// pressure, affinity, resources: "Pod was rejected: …"): it wrote nothing.
pub(crate) fn rejected(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    let started = status
        .container_statuses
        .iter()
        .flatten()
        .filter(|c| c.name == CONTAINER)
        .any(|c| {
            let state = c.state.as_ref();
            state.is_some_and(|s| s.running.is_some() || s.terminated.is_some())
                || c.last_state
                    .as_ref()
                    .is_some_and(|s| s.terminated.is_some())
        });
    status.phase.as_deref() == Some("Failed")
        && !started
        && status
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("Pod was rejected: "))
}

/// Whether the copier `pod` puts set-aside files back (rather than setting them aside
/// or removing them): read from its arguments, which refill wrote.
pub(crate) fn puts_back(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter(|c| c.name == CONTAINER)
        .flat_map(|c| c.args.iter().flatten())
        .any(|a| a == "--put-back")
}

/// Why the copier has not started, when its pod says (unschedulable, image pull).
pub fn waiting(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    unscheduled(status).or_else(|| {
        status
            .container_statuses
            .iter()
            .flatten()
            .find_map(|c| c.state.as_ref()?.waiting.as_ref())
            .and_then(|w| w.reason.clone().map(|r| (r, w.message.clone())))
            .filter(|(reason, _)| reason != "ContainerCreating")
            .map(|(reason, message)| match message {
                Some(m) => format!("{reason}: {m}"),
                None => reason,
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };

    fn paths() -> PathRestore {
        PathRestore {
            include: vec!["db".into(), "conf/*.yaml".into()],
            exclude: vec!["db/cache".into()],
            mirror: true,
        }
    }

    #[test]
    fn the_copier_mounts_the_snapshot_read_only_and_runs_refill_copy_on_the_node() {
        let paths = paths();
        let nodes = ["real-a".to_string()];
        let pod = pod(Copier {
            name: "refill-copy-data-abc".into(),
            namespace: "shop",
            source_claim: Some("refill-scratch-data-xyz"),
            target_claim: "data",
            restore_key: "velero/r1".into(),
            restore_uid: "uid-1",
            nodes: &nodes,
            tolerations: &[],
            image: "refill.local/refill:dev",
            job: Job::Paths(&paths),
        });
        let spec = pod.spec.unwrap();
        let container = &spec.containers[0];
        assert_eq!(
            container.args.as_ref().unwrap().join(" "),
            "copy --from /source --to /target --include db --include conf/*.yaml --exclude db/cache --mirror --termination-log /dev/termination-log"
        );
        let volumes = spec.volumes.unwrap();
        let claim = |v: &Volume| v.persistent_volume_claim.clone().unwrap();
        assert_eq!(claim(&volumes[1]).claim_name, "refill-scratch-data-xyz");
        assert_eq!(claim(&volumes[1]).read_only, Some(true));
        assert_eq!(claim(&volumes[0]).claim_name, "data");
        assert_eq!(claim(&volumes[0]).read_only, Some(false));
        let security = container.security_context.clone().unwrap();
        assert_eq!(security.run_as_user, Some(0));
        let capabilities = security.capabilities.unwrap();
        assert_eq!(capabilities.drop, Some(vec!["ALL".to_string()]));
        assert_eq!(
            capabilities.add.unwrap(),
            ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"],
            "no DAC_READ_SEARCH, nor anything else"
        );
        let terms = spec
            .affinity
            .unwrap()
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        assert_eq!(
            terms[0].match_fields.as_ref().unwrap()[0].values,
            Some(vec!["real-a".to_string()])
        );
        assert_eq!(
            pod.metadata.labels.unwrap()[labels::ROLE],
            labels::ROLE_COPIER
        );
    }

    #[test]
    fn a_staged_copy_mirrors_the_whole_claim_and_a_clearing_mounts_only_the_pvc() {
        let join = |job| args(job).join(" ");
        assert_eq!(
            join(Job::Whole { mirror: true }),
            "copy --from /source --to /target --whole --exclude .velero --mirror --termination-log /dev/termination-log"
        );
        assert_eq!(
            join(Job::Whole { mirror: false }),
            "copy --from /source --to /target --whole --exclude .velero --termination-log /dev/termination-log",
            "extra files kept"
        );
        assert_eq!(
            join(Job::SetAside(".refill-aside-u")),
            "copy --set-aside .refill-aside-u --to /target --exclude .velero --termination-log /dev/termination-log"
        );
        assert_eq!(
            join(Job::Tidy(".refill-aside-u")),
            "copy --tidy .refill-aside-u --to /target --termination-log /dev/termination-log"
        );
        assert_eq!(
            join(Job::PutBack {
                dir: ".refill-aside-u",
                delete_written: true
            }),
            "copy --put-back .refill-aside-u --to /target --delete-written --exclude .velero --termination-log /dev/termination-log"
        );
        let back = pod(Copier {
            name: "refill-copy-data-abc".into(),
            namespace: "shop",
            source_claim: None,
            target_claim: "data",
            restore_key: "velero/r1".into(),
            restore_uid: "uid-1",
            nodes: &[],
            tolerations: &[],
            image: "refill.local/refill:dev",
            job: Job::PutBack {
                dir: ".refill-aside-uid-1",
                delete_written: false,
            },
        });
        assert!(puts_back(&back), "what it does is read back from the pod");
        let clearing = pod(Copier {
            name: "refill-copy-data-abc".into(),
            namespace: "shop",
            source_claim: None,
            target_claim: "data",
            restore_key: "velero/r1".into(),
            restore_uid: "uid-1",
            nodes: &[],
            tolerations: &[],
            image: "refill.local/refill:dev",
            job: Job::SetAside(".refill-aside-uid-1"),
        });
        let spec = clearing.spec.unwrap();
        let volumes = spec.volumes.unwrap();
        assert_eq!(volumes.len(), 1, "no scratch claim to read from");
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "data"
        );
        assert!(spec.affinity.is_none(), "the claim's volume decides where");
    }

    #[test]
    fn a_copier_the_kubelet_refused_before_it_started_wrote_nothing() {
        let refused = |message: &str| Pod {
            status: Some(PodStatus {
                phase: Some("Failed".into()),
                message: Some(message.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(rejected(&refused(
            "Pod was rejected: The node had condition: [DiskPressure]. "
        )));
        // Failed for another reason (evicted while running, its node gone): it may
        // have run.
        assert!(!rejected(&refused("The node was low on resource: memory.")));
        let mut ran = ended(1, "boom");
        ran.status.as_mut().unwrap().phase = Some("Failed".into());
        ran.status.as_mut().unwrap().message = Some("Pod was rejected: later".into());
        assert!(!rejected(&ran), "its container ran");
        assert!(!rejected(&Pod::default()));
    }

    fn ended(exit_code: i32, message: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: CONTAINER.into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code,
                            message: Some(message.into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_copiers_end_is_read_from_its_termination_message() {
        let done = outcome(&ended(
            0,
            r#"{"filesWritten":2,"bytesWritten":10,"deleted":1}"#,
        ));
        let summary = done.unwrap().unwrap();
        assert_eq!((summary.files_written, summary.deleted), (2, 1));
        let failed = outcome(&ended(
            1,
            r#"{"error":"chown /target/x: Operation not permitted"}"#,
        ));
        assert_eq!(
            failed,
            Some(Err("chown /target/x: Operation not permitted".into()))
        );
        let garbled = outcome(&ended(0, "oops")).unwrap().unwrap_err();
        assert!(garbled.contains("could not be read"), "{garbled}");
        assert_eq!(outcome(&Pod::default()), None, "still running");
    }
}
