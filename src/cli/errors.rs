//! Exit codes, and errors worded for the person at the terminal: kube API errors become
//! sentences that say what was missing or refused and what to run next.

use crate::controller::runtime::error::is_not_found;

/// Success; for `--wait`, the restore ended Completed.
pub(crate) const EXIT_OK: u8 = 0;
/// An error, or input refill refuses (including a request validation rejects).
pub(super) const EXIT_ERROR: u8 = 1;
/// The command line itself is wrong (clap's own exit code).
#[allow(
    dead_code,
    reason = "clap exits with it itself; named so that every code is here"
)]
pub(super) const EXIT_USAGE: u8 = 2;
/// The restore ended PartiallyFailed, Failed or Canceled.
pub(super) const EXIT_RESTORE_FAILED: u8 = 3;
/// No refill controller picked up the restore.
pub(super) const EXIT_NO_CONTROLLER: u8 = 4;

/// Interrupted while following a restore (the restore goes on).
pub(super) const EXIT_INTERRUPTED: u8 = 130;

/// An error with the exit code it ends the process with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct CliError {
    /// The process's exit code (see the `EXIT_` constants).
    pub code: u8,
    /// What to tell the person at the terminal.
    pub message: String,
}

impl CliError {
    /// An error ending with exit code 1.
    pub(crate) fn new(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_ERROR,
            message: message.into(),
        }
    }

    /// An error ending with exit code `code`.
    pub(crate) fn with_code(code: u8, message: impl Into<String>) -> Self {
        CliError {
            code,
            message: message.into(),
        }
    }
}

pub(super) type Result<T, E = CliError> = std::result::Result<T, E>;

/// The kinds the CLI reads and writes, for wording errors about them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    DataRestore,
    DataRestoreSchedule,
    VolumePluginRestore,
    Backup,
    Schedule,
    PodVolumeBackup,
    Event,
    /// Whatever validation reads (PVCs, pods, nodes, ...).
    Object,
}

impl Kind {
    /// How the kind is named in a sentence.
    pub(super) fn noun(self) -> &'static str {
        match self {
            Kind::DataRestore => "restore",
            Kind::DataRestoreSchedule => "restore schedule",
            Kind::VolumePluginRestore => "volume plugin restore",
            Kind::Backup => "backup",
            Kind::Schedule => "schedule",
            Kind::PodVolumeBackup => "pod volume backup",
            Kind::Event => "event",
            Kind::Object => "object",
        }
    }

    /// The `refill` subcommand for this kind, for those refill creates.
    pub(super) fn verb(self) -> Option<&'static str> {
        match self {
            Kind::DataRestore => Some("restore"),
            Kind::DataRestoreSchedule => Some("schedule"),
            _ => None,
        }
    }

    /// What to run to find the existing objects of this kind.
    fn list_hint(self) -> Option<&'static str> {
        match self {
            Kind::DataRestore => Some("list restores with: refill restore get"),
            Kind::DataRestoreSchedule => Some("list restore schedules with: refill schedule get"),
            Kind::Backup => Some("list backups with: refill backup get"),
            Kind::Schedule => {
                Some("list schedules with: kubectl get schedules.velero.io -n <namespace>")
            }
            _ => None,
        }
    }

    /// Why the API may not know the kind at all.
    fn missing_kind_hint(self) -> &'static str {
        match self {
            Kind::DataRestore | Kind::DataRestoreSchedule | Kind::VolumePluginRestore => {
                "refill's CustomResourceDefinitions are not installed; install them with: refill crds | kubectl apply -f -"
            }
            Kind::Backup | Kind::Schedule | Kind::PodVolumeBackup => {
                "Velero's CustomResourceDefinitions are not installed; is Velero installed in this cluster?"
            }
            Kind::Event => "the cluster does not serve core/v1 events",
            Kind::Object => "the cluster does not serve a kind refill needs",
        }
    }
}

/// What a failed API call was about.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target<'a> {
    pub kind: Kind,
    /// The object's name, when the call was about one object.
    pub name: Option<&'a str>,
    pub namespace: &'a str,
}

impl<'a> Target<'a> {
    pub(super) fn one(kind: Kind, name: &'a str, namespace: &'a str) -> Self {
        Target {
            kind,
            name: Some(name),
            namespace,
        }
    }

    pub(super) fn all(kind: Kind, namespace: &'a str) -> Self {
        Target {
            kind,
            name: None,
            namespace,
        }
    }
}

/// `kind "name" not found in namespace "ns"; <how to list them>`.
pub(super) fn not_found(target: Target<'_>) -> CliError {
    let Target {
        kind,
        name,
        namespace,
    } = target;
    let mut message = format!(
        "{} \"{}\" not found in namespace \"{namespace}\"",
        kind.noun(),
        name.unwrap_or_default()
    );
    if let Some(hint) = kind.list_hint() {
        message += "; ";
        message += hint;
    }
    CliError::new(message)
}

/// `kind "name" already exists in namespace "ns"; <how to make room>`.
pub(super) fn already_exists(target: Target<'_>) -> CliError {
    let name = target.name.unwrap_or_default();
    let mut message = format!(
        "{} \"{name}\" already exists in namespace \"{}\"",
        target.kind.noun(),
        target.namespace
    );
    if let Some(verb) = target.kind.verb() {
        message +=
            &format!("; pick another name, or delete it first with: refill {verb} delete {name}");
    }
    CliError::new(message)
}

/// Turns a kube error into a sentence about `target`; `server` is the API's URL.
pub(super) fn kube_error(err: &kube::Error, target: Target<'_>, server: &str) -> CliError {
    match err {
        kube::Error::Api(status) => api_status(status, target, server),
        kube::Error::HyperError(_) | kube::Error::Service(_) => CliError::new(format!(
            "cannot reach the Kubernetes API at {server}: {}. Is the cluster up, and is KUBECONFIG (or --kubeconfig/--context) right?",
            root_cause(err)
        )),
        kube::Error::Auth(_) => CliError::new(format!(
            "cannot authenticate to the Kubernetes API at {server}: {}; check the credentials in your kubeconfig",
            root_cause(err)
        )),
        other => CliError::new(format!(
            "talking to the Kubernetes API at {server}: {}",
            root_cause(other)
        )),
    }
}

fn api_status(status: &kube::core::Status, target: Target<'_>, server: &str) -> CliError {
    let noun = target.kind.noun();
    let ns = target.namespace;
    match status.code {
        404 if names_an_object(status) && target.name.is_some() => not_found(target),
        404 => CliError::new(format!(
            "the cluster at {server} does not know the {noun} kind: {}",
            target.kind.missing_kind_hint()
        )),
        409 if status.reason == "AlreadyExists" => already_exists(target),
        403 => CliError::new(format!(
            "permission denied: {}; ask for access to {noun}s in namespace \"{ns}\", or use another --context",
            status.message
        )),
        401 => CliError::new(format!(
            "the Kubernetes API at {server} did not accept your credentials (401 Unauthorized); check your kubeconfig"
        )),
        422 => CliError::new(format!(
            "the API server refused the {noun}: {}",
            status.message
        )),
        code => CliError::new(format!(
            "the Kubernetes API at {server} answered {code} {}: {}",
            status.reason, status.message
        )),
    }
}

/// A 404 about a missing object names it; one about a missing resource type does not.
fn names_an_object(status: &kube::core::Status) -> bool {
    status.details.as_ref().is_some_and(|d| !d.name.is_empty())
        || status.message.ends_with("not found")
}

/// The innermost cause's text, e.g. "Connection refused (os error 111)".
pub(super) fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

/// Whether the error says the object itself is not there (not its resource type).
pub(super) fn is_missing_object(err: &kube::Error) -> bool {
    is_not_found(err) && matches!(err, kube::Error::Api(s) if names_an_object(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use kube::core::response::StatusDetails;

    fn status(code: u16, reason: &str, message: &str, name: &str) -> kube::Error {
        let mut s = Status::failure(message, reason).with_code(code);
        if !name.is_empty() {
            let details: StatusDetails =
                serde_json::from_value(serde_json::json!({ "name": name })).unwrap();
            s = s.with_details(details);
        }
        kube::Error::Api(Box::new(s))
    }

    const SERVER: &str = "https://127.0.0.1:6443";

    #[test]
    fn unknown_backup_names_it_and_says_how_to_list() {
        let err = status(
            404,
            "NotFound",
            "backups.velero.io \"nope\" not found",
            "nope",
        );
        let e = kube_error(&err, Target::one(Kind::Backup, "nope", "velero"), SERVER);
        assert_eq!(
            e.message,
            "backup \"nope\" not found in namespace \"velero\"; list backups with: refill backup get"
        );
        assert_eq!(e.code, EXIT_ERROR);
        assert!(is_missing_object(&err));
    }

    #[test]
    fn missing_crd_is_not_a_missing_object() {
        let err = status(
            404,
            "NotFound",
            "the server could not find the requested resource",
            "",
        );
        assert!(!is_missing_object(&err));
        let e = kube_error(&err, Target::one(Kind::DataRestore, "r", "velero"), SERVER);
        assert!(
            e.message.contains("refill crds | kubectl apply -f -"),
            "{}",
            e.message
        );
        let e = kube_error(&err, Target::all(Kind::Backup, "velero"), SERVER);
        assert!(e.message.contains("is Velero installed"), "{}", e.message);
    }

    #[test]
    fn conflict_forbidden_and_unauthorized_read_well() {
        let err = status(
            409,
            "AlreadyExists",
            "datarestores.refill.dev \"r\" already exists",
            "r",
        );
        let e = kube_error(&err, Target::one(Kind::DataRestore, "r", "velero"), SERVER);
        assert_eq!(
            e.message,
            "restore \"r\" already exists in namespace \"velero\"; pick another name, or delete it first with: refill restore delete r"
        );
        let err = status(
            409,
            "AlreadyExists",
            "datarestoreschedules.refill.dev \"s\" already exists",
            "s",
        );
        let e = kube_error(
            &err,
            Target::one(Kind::DataRestoreSchedule, "s", "velero"),
            SERVER,
        );
        assert_eq!(
            e.message,
            "restore schedule \"s\" already exists in namespace \"velero\"; pick another name, or delete it first with: refill schedule delete s"
        );
        let err = status(
            403,
            "Forbidden",
            "backups.velero.io is forbidden: User \"u\" cannot list",
            "",
        );
        let e = kube_error(&err, Target::all(Kind::Backup, "velero"), SERVER);
        assert!(
            e.message
                .starts_with("permission denied: backups.velero.io is forbidden"),
            "{}",
            e.message
        );
        let err = status(401, "Unauthorized", "Unauthorized", "");
        let e = kube_error(&err, Target::all(Kind::Backup, "velero"), SERVER);
        assert!(e.message.contains("401 Unauthorized"), "{}", e.message);
    }

    #[test]
    fn root_cause_is_the_innermost_error() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let outer = anyhow::Error::new(io).context("connecting");
        assert_eq!(root_cause(outer.as_ref()), "Connection refused");
    }
}
