//! The command line as clap reads it: flags, arguments and help texts.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand, ValueEnum};

use crate::api::{
    ConsumerPolicy, ExtraFiles, FailurePolicy, GitOpsPolicy, RestoreMethod, RestoreTarget,
};

/// The exit codes, for help texts (a macro so that `concat!` can use it).
macro_rules! exit_codes {
    () => {
        "Exit codes:
  0    success (with --wait: the restore ended Completed)
  1    error, or invalid input
  2    usage error (wrong flags or arguments)
  3    the restore ended PartiallyFailed, Failed or Canceled
  4    no refill controller picked up the restore
  130  interrupted while waiting (the restore goes on)"
    };
}

/// The exit codes as `--help` shows them.
pub(super) const EXIT_CODES_HELP: &str = exit_codes!();

/// Shown at the end of `refill --help`.
pub const AFTER_HELP: &str = concat!(
    exit_codes!(),
    "

As a kubectl plugin: put a link named kubectl-refill on your PATH, e.g.
  ln -s \"$(command -v refill)\" ~/.local/bin/kubectl-refill
and run `kubectl refill restore get`."
);

/// Flags every subcommand takes.
#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Velero's namespace, where Backups live and DataRestores are created.
    #[arg(
        short = 'n',
        long,
        global = true,
        env = "REFILL_NAMESPACE",
        default_value = "velero",
        value_name = "NAMESPACE"
    )]
    pub namespace: String,

    /// Kubeconfig file to use instead of $KUBECONFIG or ~/.kube/config.
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of the current one.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
}

/// How to print objects instead of the human-readable text.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Yaml,
    Json,
}

/// The `refill restore` subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum RestoreCommand {
    /// Create a DataRestore: put chosen PVCs' files back as a backup holds them.
    #[command(after_help = CREATE_HELP)]
    Create(Box<CreateArgs>),
    /// List DataRestores, newest first, or show one.
    Get(GetArgs),
    /// Show one DataRestore in detail: volumes, consumers, errors and events.
    Describe(DescribeArgs),
    /// Follow a DataRestore until it ends, with progress per volume.
    #[command(after_help = EXIT_CODES_HELP)]
    Wait(WaitArgs),
    /// Delete a DataRestore; the controller first brings stopped consumers back.
    Delete(DeleteArgs),
}

const CREATE_HELP: &str = concat!(
    "Examples:
  refill restore create fix-db --from-backup nightly-20260101 --pvc shop/data-db-0 --wait
  refill restore create fix-shop --from-schedule nightly --include-namespaces shop --dry-run
  refill restore create fix-web --from-backup b1 --selector 'app=web,tier in (cache,db)'

",
    exit_codes!()
);

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumersArg {
    /// Scale Deployments, StatefulSets, ReplicaSets and ReplicationControllers to zero.
    ScaleDown,
    /// Also delete bare pods, park DaemonSets, suspend CronJobs, wait for Jobs.
    Detach,
    /// Fail if anything mounts a PVC to restore.
    Refuse,
    /// Stop nothing: files are overwritten under running applications (needs
    /// --acknowledge-running-consumers).
    None,
}

impl From<ConsumersArg> for ConsumerPolicy {
    fn from(value: ConsumersArg) -> Self {
        match value {
            ConsumersArg::ScaleDown => ConsumerPolicy::ScaleDown,
            ConsumersArg::Detach => ConsumerPolicy::Detach,
            ConsumersArg::Refuse => ConsumerPolicy::Refuse,
            ConsumersArg::None => ConsumerPolicy::None,
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetArg {
    /// Back into each PVC, its consumers stopped meanwhile.
    InPlace,
    /// Into a new PVC beside each one (named in the status); nothing is stopped.
    NewClaim,
}

impl From<TargetArg> for RestoreTarget {
    fn from(value: TargetArg) -> Self {
        match value {
            TargetArg::InPlace => RestoreTarget::InPlace,
            TargetArg::NewClaim => RestoreTarget::NewClaim,
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodArg {
    /// Stop the consumers, then have Velero's node agent write the backup into the
    /// PVC: they are down for the whole restore.
    Direct,
    /// Have the node agent fill a scratch claim beside the PVC while the consumers
    /// keep running, then stop them only while refill copies the difference into the
    /// PVC. The scratch claim has the PVC's StorageClass and size: there must be room
    /// for a second copy of each volume for as long as the restore runs. What the app
    /// writes during the fill is discarded. Not with --target new-claim, which stops
    /// nothing.
    Staged,
}

impl From<MethodArg> for RestoreMethod {
    fn from(value: MethodArg) -> Self {
        match value {
            MethodArg::Direct => RestoreMethod::Direct,
            MethodArg::Staged => RestoreMethod::Staged,
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtraFilesArg {
    /// Remove the files and directories the backup does not hold: each volume ends
    /// holding exactly the backup.
    Delete,
    /// Write the backup's files over what is there and remove nothing. Not with
    /// --target new-claim, whose new claim holds only the backup.
    Keep,
}

impl From<ExtraFilesArg> for ExtraFiles {
    fn from(value: ExtraFilesArg) -> Self {
        match value {
            ExtraFilesArg::Delete => ExtraFiles::Delete,
            ExtraFilesArg::Keep => ExtraFiles::Keep,
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailureArg {
    /// Bring consumers back to their replica counts.
    Resume,
    /// Leave consumers stopped, to look at the volume first.
    KeepStopped,
}

impl From<OnFailureArg> for FailurePolicy {
    fn from(value: OnFailureArg) -> Self {
        match value {
            OnFailureArg::Resume => FailurePolicy::Resume,
            OnFailureArg::KeepStopped => FailurePolicy::KeepStopped,
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitOpsArg {
    /// Suspend the Flux Kustomizations, HelmReleases and Argo CD Applications that
    /// manage the consumers during the restore, and put them back afterwards.
    Pause,
    /// Leave them alone; one that scales a consumer back up fails its volumes.
    Ignore,
    /// Refuse to restore a PVC whose consumers one of them manages.
    Refuse,
}

impl From<GitOpsArg> for GitOpsPolicy {
    fn from(value: GitOpsArg) -> Self {
        match value {
            GitOpsArg::Pause => GitOpsPolicy::Pause,
            GitOpsArg::Ignore => GitOpsPolicy::Ignore,
            GitOpsArg::Refuse => GitOpsPolicy::Refuse,
        }
    }
}

#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("source").required(true).args(["from_backup", "from_schedule"])))]
pub struct CreateArgs {
    /// Name of the DataRestore.
    pub name: String,

    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub restore: RestoreArgs,

    /// Follow the restore until it ends; exit 0 only if it Completed.
    #[arg(long)]
    pub wait: bool,

    /// Validate and print what would be done; change nothing.
    #[arg(long, conflicts_with = "wait")]
    pub dry_run: bool,

    /// Print the DataRestore as YAML or JSON (with --dry-run: the one that would be created).
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,

    #[command(flatten)]
    pub follow: FollowArgs,
}

/// The backup a restore restores: `restore create` needs one of them, a schedule's
/// template only with --cron alone.
#[derive(Args, Debug, Clone, Default)]
pub struct SourceArgs {
    /// The Velero Backup to restore from.
    #[arg(long, value_name = "BACKUP")]
    pub from_backup: Option<String>,

    /// A Velero Schedule: its newest Completed backup is used.
    #[arg(long, value_name = "SCHEDULE")]
    pub from_schedule: Option<String>,
}

/// What to restore and how: the flags of `restore create` that make a DataRestore's
/// spec apart from its backup, shared with a schedule's template.
#[derive(Args, Debug, Clone, Default)]
pub struct RestoreArgs {
    /// Restore every file-system-backed PVC of the backup in these namespaces.
    #[arg(long, value_delimiter = ',', value_name = "NS[,NS...]")]
    pub include_namespaces: Vec<String>,

    /// A PVC to restore, as namespace/name (repeatable).
    #[arg(long = "pvc", value_name = "NAMESPACE/NAME")]
    pub pvcs: Vec<String>,

    /// Restore the backup's PVCs whose labels match, e.g. 'app=db,tier in (a,b),!skip'.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,

    /// Nodes the stand-in pod for a PVC may run on (repeatable); needed for unbound
    /// WaitForFirstConsumer claims.
    #[arg(long = "candidate-nodes", value_name = "NS/PVC=NODE[,NODE...]")]
    pub candidate_nodes: Vec<String>,

    /// Where the files go [default: in-place].
    #[arg(long, value_enum, value_name = "TARGET")]
    pub target: Option<TargetArg>,

    /// With --target new-claim: move the workloads labelled refill.dev/switch-claim=<PVC
    /// name> onto the PVC's new claim once it holds the backup (each is scaled to zero,
    /// then back with its pod template naming the new claim).
    #[arg(long)]
    pub switch_workloads: bool,

    /// Put back only this path of every PVC, a glob relative to the volume's root such
    /// as db/data.db, config or logs/**/*.gz (repeatable); the rest of each volume is
    /// left as it is.
    #[arg(long = "path", value_name = "GLOB")]
    pub paths: Vec<String>,

    /// With --path: leave paths matching this glob as they are (repeatable).
    #[arg(long = "exclude", value_name = "GLOB", requires = "paths")]
    pub exclude: Vec<String>,

    /// With --path: also delete what the PVC has under the paths and the backup does not.
    #[arg(long, requires = "paths")]
    pub mirror: bool,

    /// How each whole PVC is put back [default: direct]. Not with --path: a path
    /// restore always fills a scratch claim first.
    #[arg(long, value_enum, value_name = "METHOD", conflicts_with = "paths")]
    pub method: Option<MethodArg>,

    /// What becomes of the files and directories a PVC holds and the backup does not
    /// [default: delete]. Not with --path: a path restore deletes only under its paths,
    /// with --mirror.
    #[arg(long, value_enum, value_name = "WHAT", conflicts_with = "paths")]
    pub extra_files: Option<ExtraFilesArg>,

    /// What to do with workloads that mount a PVC being restored [default: scale-down].
    #[arg(long, value_enum, value_name = "POLICY")]
    pub consumers: Option<ConsumersArg>,

    /// With --consumers none: says that files are overwritten under running
    /// applications, which may read half-restored files or write over them.
    #[arg(long)]
    pub acknowledge_running_consumers: bool,

    /// What to do with stopped consumers when a volume fails [default: resume].
    #[arg(long, value_enum, value_name = "POLICY")]
    pub on_failure: Option<OnFailureArg>,

    /// What to do with the GitOps objects (Flux, Argo CD) that manage the consumers
    /// [default: pause].
    #[arg(long, value_enum, value_name = "POLICY")]
    pub gitops: Option<GitOpsArg>,

    /// Where Argo CD's Applications are [default: argocd].
    #[arg(long, value_name = "NAMESPACE")]
    pub argocd_namespace: Option<String>,

    /// The label Argo CD tracks resources with, when it uses label tracking.
    #[arg(long, value_name = "KEY")]
    pub argocd_instance_label: Option<String>,

    /// How many volumes to restore at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub parallel: Option<u32>,

    /// How long the whole restore may take, e.g. 2h or 1h30m.
    #[arg(long, value_name = "DURATION", value_parser = duration_text)]
    pub timeout: Option<String>,

    /// How long one volume may take, from stopping its consumers to done, e.g. 30m.
    #[arg(long, value_name = "DURATION", value_parser = duration_text)]
    pub volume_timeout: Option<String>,

    /// Image of Velero's restore-wait init container (default: from Velero's config).
    #[arg(long, value_name = "IMAGE")]
    pub restore_helper_image: Option<String>,

    /// Image of the stand-in pod's idle container.
    #[arg(long, value_name = "IMAGE")]
    pub stand_in_image: Option<String>,
}

/// Settings for following a restore.
#[derive(Args, Debug, Clone)]
pub struct FollowArgs {
    /// How long a new restore may go without status before refill concludes that no
    /// controller is running.
    #[arg(long, hide = true, default_value = "10s", value_parser = humantime::parse_duration)]
    pub pickup_timeout: Duration,
}

#[derive(Args, Debug, Clone)]
pub struct GetArgs {
    /// Show only this DataRestore.
    pub name: Option<String>,
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

#[derive(Args, Debug, Clone)]
pub struct DescribeArgs {
    pub name: String,
    /// Also show the VolumePluginRestores, conditions and the full spec.
    #[arg(long)]
    pub details: bool,
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

#[derive(Args, Debug, Clone)]
pub struct WaitArgs {
    pub name: String,
    /// Print the DataRestore as YAML or JSON once it has ended.
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
    #[command(flatten)]
    pub follow: FollowArgs,
}

#[derive(Args, Debug, Clone)]
pub struct DeleteArgs {
    pub name: String,
    /// Wait until the controller has rolled back and the DataRestore is gone.
    #[arg(long)]
    pub wait: bool,
}

/// The `refill schedule` subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum ScheduleCommand {
    /// Create a DataRestoreSchedule: restore the same PVCs on each new backup of a
    /// Velero Schedule, and/or at cron times.
    #[command(after_help = SCHEDULE_CREATE_HELP)]
    Create(Box<ScheduleCreateArgs>),
    /// List DataRestoreSchedules, newest first, or show one.
    Get(ScheduleGetArgs),
    /// Show one DataRestoreSchedule in detail: its spec, status and restores.
    Describe(ScheduleDescribeArgs),
    /// Start no new restore until unpaused; a running one goes on.
    Pause(ScheduleNameArgs),
    /// Let the schedule start restores again.
    Unpause(ScheduleNameArgs),
    /// Delete a DataRestoreSchedule and the restores it made.
    Delete(ScheduleNameArgs),
}

const SCHEDULE_CREATE_HELP: &str = "Examples:
  refill schedule create standby --follow-schedule nightly --include-namespaces shop
  refill schedule create reset-demo --cron '0 3 * * *' --from-backup golden --pvc demo/data
  refill schedule create refresh --follow-schedule nightly --cron '0 */6 * * *' --pvc shop/data-db-0 --dry-run

With --follow-schedule, each run restores the backup it was started for: leave out
--from-backup and --from-schedule. With --cron alone, name what each run restores.
Cron times are in UTC.";

#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("source").args(["from_backup", "from_schedule"])))]
#[command(group(ArgGroup::new("trigger").required(true).multiple(true).args(["follow_schedule", "cron"])))]
pub struct ScheduleCreateArgs {
    /// Name of the DataRestoreSchedule.
    pub name: String,

    /// Restore each new Completed backup of this Velero Schedule (its newest one at once).
    #[arg(long, value_name = "VELERO_SCHEDULE")]
    pub follow_schedule: Option<String>,

    /// Restore at these times, a cron expression in UTC such as '0 3 * * *'.
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,

    /// Create it paused: no restore starts until `refill schedule unpause`.
    #[arg(long)]
    pub paused: bool,

    /// Completed restores to keep; older ones are deleted [default: 3].
    #[arg(long, value_name = "N")]
    pub keep_completed: Option<u32>,

    /// Restores that ended otherwise to keep [default: 3].
    #[arg(long, value_name = "N")]
    pub keep_failed: Option<u32>,

    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub restore: RestoreArgs,

    /// Check and print the DataRestoreSchedule that would be created (YAML unless -o
    /// says otherwise); change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Print the DataRestoreSchedule as YAML or JSON.
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

#[derive(Args, Debug, Clone)]
pub struct ScheduleGetArgs {
    /// Show only this DataRestoreSchedule.
    pub name: Option<String>,
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

#[derive(Args, Debug, Clone)]
pub struct ScheduleDescribeArgs {
    pub name: String,
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

#[derive(Args, Debug, Clone)]
pub struct ScheduleNameArgs {
    /// The DataRestoreSchedule.
    pub name: String,
}

/// The `refill backup` subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum BackupCommand {
    /// List Velero Backups, newest first, with their file-system-backed volume count.
    Get {
        /// Show only this backup.
        name: Option<String>,
        /// Print the backups as YAML or JSON.
        #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
        output: Option<OutputFormat>,
    },
    /// Show the file-system-backed volumes of a backup: what refill can restore.
    Describe {
        /// The Velero Backup to look into.
        name: String,
        /// Print the backup's volumes as YAML or JSON.
        #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
        output: Option<OutputFormat>,
    },
}

/// Accepts what the controller accepts (`30m`, `2h`, `1h30m`) and keeps the text.
/// The words are the controller's own ([`crate::plan::duration`]).
pub(super) fn duration_text(text: &str) -> Result<String, String> {
    crate::plan::duration(text).map(|_| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use clap::error::ErrorKind;

    /// `refill restore ...` and `refill schedule ...` as clap reads them.
    #[derive(Parser, Debug)]
    enum Line {
        #[command(subcommand)]
        Restore(RestoreCommand),
        #[command(subcommand)]
        Schedule(ScheduleCommand),
    }

    /// `refill restore create r1 --from-backup b1 --pvc shop/data` and `more`.
    fn restore_create(more: &[&str]) -> Result<RestoreArgs, clap::Error> {
        let base = ["refill", "restore", "create", "r1", "--from-backup", "b1"];
        let line = base.iter().chain(&["--pvc", "shop/data"]).chain(more);
        match Line::try_parse_from(line)? {
            Line::Restore(RestoreCommand::Create(args)) => Ok(args.restore),
            other => unreachable!("{other:?}"),
        }
    }

    #[test]
    fn method_and_extra_files_are_read_from_their_flags() {
        let defaults = restore_create(&[]).unwrap();
        assert_eq!((defaults.method, defaults.extra_files), (None, None));
        let staged = restore_create(&["--method", "staged", "--extra-files", "keep"]).unwrap();
        assert_eq!(
            (staged.method, staged.extra_files),
            (Some(MethodArg::Staged), Some(ExtraFilesArg::Keep))
        );
        let direct = restore_create(&["--method=direct", "--extra-files=delete"]).unwrap();
        assert_eq!(
            (direct.method, direct.extra_files),
            (Some(MethodArg::Direct), Some(ExtraFilesArg::Delete))
        );
        for (flag, wrong) in [("--method", "copy"), ("--extra-files", "merge")] {
            let error = restore_create(&[flag, wrong]).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidValue, "{error}");
            assert!(error.to_string().contains(flag), "{error}");
        }
    }

    #[test]
    fn a_path_restore_takes_neither_method_nor_extra_files() {
        for flag in [
            ["--method", "staged"],
            ["--method", "direct"],
            ["--extra-files", "keep"],
            ["--extra-files", "delete"],
        ] {
            let error = restore_create(&[&flag[..], &["--path", "db"]].concat()).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::ArgumentConflict, "{error}");
            let text = error.to_string();
            assert!(text.contains(flag[0]) && text.contains("--path"), "{text}");
        }
        let mirrored = restore_create(&["--path", "db", "--mirror"]).unwrap();
        assert_eq!((mirrored.method, mirrored.extra_files), (None, None));
    }

    #[test]
    fn a_schedule_takes_method_and_extra_files_for_its_template() {
        let line = "refill schedule create standby --follow-schedule nightly --pvc shop/data \
                    --method staged --extra-files keep";
        let Line::Schedule(ScheduleCommand::Create(args)) =
            Line::try_parse_from(line.split_whitespace()).unwrap()
        else {
            unreachable!()
        };
        assert_eq!(
            (args.restore.method, args.restore.extra_files),
            (Some(MethodArg::Staged), Some(ExtraFilesArg::Keep))
        );
    }

    #[test]
    fn durations_are_checked_and_kept_as_written() {
        assert_eq!(duration_text("1h30m").unwrap(), "1h30m");
        assert_eq!(duration_text("30m").unwrap(), "30m");
        assert!(duration_text("soon").unwrap_err().contains("like 30m"));
        assert!(duration_text("0s").unwrap_err().contains("is zero"));
        assert!(duration_text("-5m").unwrap_err().contains("is negative"));
    }
}
