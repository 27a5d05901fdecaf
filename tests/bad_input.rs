//! Bad input, one table: every case is given to the controller as a DataRestore applied
//! directly, and to `refill restore create` as a person would type it. Each must be
//! refused with a message that names the field (or flag) and says what to do, and
//! nothing may change: no object's resourceVersion in the test namespace moves, and the
//! apiserver's audit log holds no write by refill besides the DataRestore itself and
//! its status (and the controller's events about it).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use refill::api::{Backup, DataRestore, Phase, PodVolumeBackup, Schedule};
use refill::labels;
use refill_e2e::fixture::{self, BackedUpVolume, Run, Scene};
use refill_e2e::{TestEnv, run_test, wait_for};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// What the cluster should make of one bad DataRestore applied directly.
enum Direct {
    /// Not given to the controller (the CLI's own flag checks).
    Skip,
    /// The controller ends it Failed; an error names `field` and holds `says`.
    Failed {
        field: &'static str,
        says: &'static str,
    },
    /// The apiserver refuses to store it (the CRD schema); its answer names `field`.
    Refused { field: &'static str },
}

/// What `refill restore create NAME --from-backup ... <args>` should do.
struct Cli {
    args: Vec<String>,
    /// The exit code: 1 for refused input, 2 for flags clap itself refuses.
    code: i32,
    /// Text the message must hold, once: the flag, then what is wrong.
    flag: String,
    says: &'static str,
}

struct Case {
    name: &'static str,
    /// The DataRestore's spec, as it would be applied with kubectl.
    spec: Value,
    direct: Direct,
    cli: Option<Cli>,
}

fn cli(args: &[&str], code: i32, flag: &str, says: &'static str) -> Option<Cli> {
    Some(Cli {
        args: args.iter().map(|s| s.to_string()).collect(),
        code,
        flag: flag.to_string(),
        says,
    })
}

/// [`cli`] with the flags written as one line, split at spaces.
fn cli_line(line: &str, code: i32, flag: &str, says: &'static str) -> Option<Cli> {
    cli(
        &line.split_whitespace().collect::<Vec<_>>(),
        code,
        flag,
        says,
    )
}

fn failed(field: &'static str, says: &'static str) -> Direct {
    Direct::Failed { field, says }
}

fn cases(ns: &str) -> Vec<Case> {
    let p = |name: &str| format!("{ns}/{name}");
    let data = p("data");
    let solo = p("solo");
    let spec = |backup: &str, pvcs: &[&str]| json!({"backupName": backup, "pvcs": pvcs.iter().map(|n| p(n)).collect::<Vec<_>>()});
    let with = |mut base: Value, extra: Value| {
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    };
    vec![
        Case {
            name: "unknown-backup",
            spec: spec("nope", &["data"]),
            direct: failed("spec.backupName", "backup \"nope\" not found"),
            cli: cli(
                &["--from-backup", "nope", "--pvc", &data],
                1,
                "--from-backup",
                "backup \"nope\" not found",
            ),
        },
        Case {
            name: "backup-in-progress",
            spec: spec("running", &["data"]),
            direct: failed("spec.backupName", "backup \"running\" is InProgress"),
            cli: cli(
                &["--from-backup", "running", "--pvc", &data],
                1,
                "--from-backup",
                "backup \"running\" is InProgress",
            ),
        },
        Case {
            name: "backup-failed",
            spec: spec("broken", &["data"]),
            direct: failed("spec.backupName", "backup \"broken\" is Failed"),
            cli: cli(
                &["--from-backup", "broken", "--pvc", &data],
                1,
                "--from-backup",
                "backup \"broken\" is Failed",
            ),
        },
        Case {
            name: "schedule-without-completed-backup",
            spec: json!({"scheduleName": "weekly", "pvcs": [data]}),
            direct: failed(
                "spec.scheduleName",
                "schedule \"weekly\" has no Completed backup yet",
            ),
            cli: cli(
                &["--from-schedule", "weekly", "--pvc", &data],
                1,
                "--from-schedule",
                "schedule \"weekly\" has no Completed backup yet",
            ),
        },
        Case {
            name: "unknown-schedule",
            spec: json!({"scheduleName": "nope", "pvcs": [data]}),
            direct: failed("spec.scheduleName", "schedule \"nope\" not found"),
            cli: cli(
                &["--from-schedule", "nope", "--pvc", &data],
                1,
                "--from-schedule",
                "schedule \"nope\" not found",
            ),
        },
        Case {
            name: "backup-and-schedule",
            spec: json!({"backupName": "b1", "scheduleName": "weekly", "pvcs": [data]}),
            direct: failed(
                "spec.backupName and spec.scheduleName",
                "are both set: keep exactly one",
            ),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--from-schedule",
                    "weekly",
                    "--pvc",
                    &data,
                ],
                2,
                "--from-backup",
                "cannot be used with",
            ),
        },
        Case {
            name: "no-backup-or-schedule",
            spec: json!({"pvcs": [data]}),
            direct: failed("spec.backupName and spec.scheduleName", "are both missing"),
            cli: cli(
                &["--pvc", &data],
                2,
                "--from-backup",
                "required arguments were not provided",
            ),
        },
        Case {
            name: "empty-backup-name",
            spec: json!({"backupName": "", "pvcs": [data]}),
            direct: failed("spec.backupName", "is not a backup name: it is empty"),
            cli: cli(
                &["--from-backup", "", "--pvc", &data],
                1,
                "--from-backup",
                "is not a backup name: it is empty",
            ),
        },
        Case {
            name: "pvc-not-in-backup",
            spec: spec("b1", &["snapshotted"]),
            direct: failed(
                "spec.pvcs[0]",
                "is not in backup \"b1\" as a file-system backup",
            ),
            cli: cli(
                &["--from-backup", "b1", "--pvc", &p("snapshotted")],
                1,
                &format!("--pvc {}", p("snapshotted")),
                "is not in backup \"b1\" as a file-system backup",
            ),
        },
        Case {
            name: "pvc-backup-not-completed",
            spec: spec("b1", &["halfway"]),
            direct: failed(
                "spec.pvcs[0]",
                "has no Completed PodVolumeBackup in backup \"b1\"",
            ),
            cli: cli(
                &["--from-backup", "b1", "--pvc", &p("halfway")],
                1,
                &format!("--pvc {}", p("halfway")),
                "has no Completed PodVolumeBackup in backup \"b1\"",
            ),
        },
        Case {
            name: "pvc-gone",
            spec: spec("b1", &["gone"]),
            direct: failed(
                "spec.pvcs[0]",
                "does not exist now; refill restores into existing PVCs only",
            ),
            cli: cli(
                &["--from-backup", "b1", "--pvc", &p("gone")],
                1,
                &format!("--pvc {}", p("gone")),
                "does not exist now; refill restores into existing PVCs only",
            ),
        },
        Case {
            name: "pvc-without-namespace",
            spec: json!({"backupName": "b1", "pvcs": ["data"]}),
            direct: failed(
                "spec.pvcs[0]",
                "is not a PVC reference: write it as namespace/name",
            ),
            cli: cli(
                &["--from-backup", "b1", "--pvc", "noslash"],
                1,
                "--pvc",
                "is not a PVC reference: write it as namespace/name",
            ),
        },
        Case {
            name: "pvc-bad-namespace-name",
            spec: json!({"backupName": "b1", "pvcs": ["Bad_NS/data"]}),
            direct: failed(
                "spec.pvcs[0]",
                "\"Bad_NS\" in \"Bad_NS/data\" is not a namespace name",
            ),
            cli: cli(
                &["--from-backup", "b1", "--pvc", "Bad_NS/data"],
                1,
                "--pvc Bad_NS/data",
                "\"Bad_NS\" in \"Bad_NS/data\" is not a namespace name",
            ),
        },
        Case {
            name: "pvc-in-missing-namespace",
            spec: json!({"backupName": "b1", "pvcs": ["no-such-namespace-x7/data"]}),
            direct: failed(
                "spec.pvcs[0]",
                "PVC no-such-namespace-x7/data is not in backup \"b1\"",
            ),
            cli: cli(
                &["--from-backup", "b1", "--pvc", "no-such-namespace-x7/data"],
                1,
                "--pvc no-such-namespace-x7/data",
                "PVC no-such-namespace-x7/data is not in backup \"b1\"",
            ),
        },
        Case {
            name: "pvc-twice",
            spec: spec("b1", &["data", "solo", "data"]),
            direct: failed(
                "spec.pvcs[2]",
                "is already spec.pvcs[0]; name each PVC once",
            ),
            cli: None,
        },
        Case {
            name: "bad-included-namespace",
            spec: json!({"backupName": "b1", "includedNamespaces": ["Not A Namespace"]}),
            direct: failed("spec.includedNamespaces[0]", "is not a namespace name"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--include-namespaces",
                    "Not_A_Namespace",
                ],
                1,
                "--include-namespaces Not_A_Namespace",
                "is not a namespace name",
            ),
        },
        Case {
            name: "selector-matches-nothing",
            spec: json!({"backupName": "b1", "includedNamespaces": [ns], "selector": {"matchLabels": {"app": "nothing"}}}),
            direct: failed(
                "spec.includedNamespaces and spec.selector",
                "no file-system-backed PVC in backup \"b1\" matches",
            ),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--include-namespaces",
                    ns,
                    "--selector",
                    "app=nothing",
                ],
                1,
                "--include-namespaces and --selector",
                "no file-system-backed PVC in backup \"b1\" matches",
            ),
        },
        Case {
            name: "selector-bad-operator",
            spec: json!({"backupName": "b1", "selector": {"matchExpressions": [{"key": "app", "operator": "Like", "values": ["x"]}]}}),
            direct: failed(
                "spec.selector.matchExpressions[0].operator",
                "\"Like\" is not an operator",
            ),
            cli: None,
        },
        Case {
            name: "nothing-selected",
            spec: json!({"backupName": "b1"}),
            direct: failed(
                "spec.pvcs, spec.includedNamespaces and spec.selector",
                "are all empty, so no PVC is selected",
            ),
            cli: cli(
                &["--from-backup", "b1"],
                1,
                "--pvc, --include-namespaces and --selector",
                "are all missing, so no PVC is selected",
            ),
        },
        Case {
            name: "unbound-without-candidates",
            spec: spec("b1", &["unbound"]),
            direct: failed("spec.candidateNodes[", "binds on first consumer"),
            cli: cli(
                &["--from-backup", "b1", "--pvc", &p("unbound")],
                1,
                &format!("--candidate-nodes {}=...", p("unbound")),
                "binds on first consumer",
            ),
        },
        Case {
            name: "candidate-node-missing",
            spec: with(
                spec("b1", &["unbound"]),
                json!({"candidateNodes": {p("unbound"): ["node-z"]}}),
            ),
            direct: failed("spec.candidateNodes[", "these nodes do not exist: node-z"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("unbound"),
                    "--candidate-nodes",
                    &format!("{}=node-z", p("unbound")),
                ],
                1,
                &format!("--candidate-nodes {}=...", p("unbound")),
                "these nodes do not exist: node-z",
            ),
        },
        Case {
            name: "candidate-key-without-namespace",
            spec: with(
                spec("b1", &["solo"]),
                json!({"candidateNodes": {"unbound": ["node-a"]}}),
            ),
            direct: failed("spec.candidateNodes[\"unbound\"]", "is not a PVC reference"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--candidate-nodes",
                    "unbound=node-a",
                ],
                1,
                "--candidate-nodes",
                "is not a PVC reference",
            ),
        },
        Case {
            name: "candidate-key-not-selected",
            spec: with(
                spec("b1", &["solo"]),
                json!({"candidateNodes": {p("unbound"): ["node-a"]}}),
            ),
            direct: failed("spec.candidateNodes[", "is not among the PVCs to restore"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--candidate-nodes",
                    &format!("{}=node-a", p("unbound")),
                ],
                1,
                &format!("--candidate-nodes {}=...", p("unbound")),
                "is not among the PVCs to restore",
            ),
        },
        Case {
            name: "candidate-nodes-malformed",
            spec: with(
                spec("b1", &["unbound"]),
                json!({"candidateNodes": {p("unbound"): []}}),
            ),
            direct: failed("spec.candidateNodes[", "names no node"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("unbound"),
                    "--candidate-nodes",
                    &p("unbound"),
                ],
                1,
                "--candidate-nodes",
                "write it as namespace/pvc=node1,node2",
            ),
        },
        Case {
            name: "timeout-malformed",
            spec: with(spec("b1", &["solo"]), json!({"timeout": "soon"})),
            direct: failed("spec.timeout", "\"soon\" is not a duration"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--timeout",
                    "soon",
                ],
                2,
                "--timeout",
                "write it like 30m",
            ),
        },
        Case {
            name: "volume-timeout-malformed",
            spec: with(
                spec("b1", &["solo"]),
                json!({"volumeTimeout": "30 minutes please"}),
            ),
            direct: failed("spec.volumeTimeout", "is not a duration"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--volume-timeout",
                    "1x",
                ],
                2,
                "--volume-timeout",
                "write it like 30m",
            ),
        },
        Case {
            name: "timeout-zero",
            spec: with(spec("b1", &["solo"]), json!({"timeout": "0s"})),
            direct: failed("spec.timeout", "\"0s\" is zero"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--timeout",
                    "0s",
                ],
                2,
                "--timeout",
                "\"0s\" is zero",
            ),
        },
        Case {
            name: "volume-timeout-negative",
            spec: with(spec("b1", &["solo"]), json!({"volumeTimeout": "-5m"})),
            direct: failed("spec.volumeTimeout", "\"-5m\" is negative"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--volume-timeout=-5m",
                ],
                2,
                "--volume-timeout",
                "\"-5m\" is negative",
            ),
        },
        Case {
            name: "parallel-zero",
            spec: with(spec("b1", &["solo"]), json!({"parallel": 0})),
            direct: failed("spec.parallel", "0 would restore nothing"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--parallel",
                    "0",
                ],
                2,
                "--parallel",
                "0 is not in 1..",
            ),
        },
        Case {
            name: "parallel-negative",
            spec: with(spec("b1", &["solo"]), json!({"parallel": -1})),
            direct: Direct::Refused {
                field: "spec.parallel",
            },
            cli: cli(
                &["--from-backup", "b1", "--pvc", &p("solo"), "--parallel=-1"],
                2,
                "--parallel",
                "invalid value",
            ),
        },
        Case {
            name: "consumers-unknown",
            spec: with(spec("b1", &["solo"]), json!({"consumers": "Bogus"})),
            direct: Direct::Refused {
                field: "spec.consumers",
            },
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--consumers",
                    "bogus",
                ],
                2,
                "--consumers",
                "invalid value 'bogus'",
            ),
        },
        Case {
            name: "refuse-with-running-consumer",
            spec: with(spec("b1", &["data"]), json!({"consumers": "Refuse"})),
            direct: failed(
                "spec.consumers",
                "spec.consumers is Refuse, which forbids restoring a PVC in use",
            ),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &data,
                    "--consumers",
                    "refuse",
                ],
                1,
                "--consumers",
                "--consumers is refuse, which forbids restoring a PVC in use",
            ),
        },
        Case {
            name: "running-consumers-unacknowledged",
            spec: with(spec("b1", &["data"]), json!({"consumers": "None"})),
            direct: failed(
                "spec.acknowledgeRunningConsumers",
                "spec.consumers is None, which overwrites files under applications that keep running",
            ),
            cli: cli(
                &["--from-backup", "b1", "--pvc", &data, "--consumers", "none"],
                1,
                "--acknowledge-running-consumers",
                "--consumers is none, which overwrites files under applications that keep running",
            ),
        },
        Case {
            name: "absolute-path",
            spec: with(
                spec("b1", &["data"]),
                json!({"paths": {"include": ["db", "/etc/passwd"]}}),
            ),
            direct: failed(
                "spec.paths.include[1]",
                "\"/etc/passwd\" is absolute; paths are relative to the volume's root",
            ),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &data,
                    "--path",
                    "db",
                    "--path",
                    "/etc/passwd",
                ],
                1,
                "--path /etc/passwd",
                "\"/etc/passwd\" is absolute; paths are relative to the volume's root",
            ),
        },
        Case {
            name: "staged-into-new-claim",
            spec: with(
                spec("b1", &["solo"]),
                json!({"target": "NewClaim", "method": "Staged"}),
            ),
            direct: failed("spec.method", "is Staged, but spec.target is NewClaim"),
            cli: cli_line(
                &format!("--from-backup b1 --pvc {solo} --target new-claim --method staged"),
                1,
                "--method",
                "is staged, but --target is new-claim",
            ),
        },
        Case {
            name: "extra-files-kept-in-new-claim",
            spec: with(
                spec("b1", &["solo"]),
                json!({"target": "NewClaim", "extraFiles": "Keep"}),
            ),
            direct: failed("spec.extraFiles", "a new claim holds only the backup"),
            cli: cli_line(
                &format!("--from-backup b1 --pvc {solo} --target new-claim --extra-files keep"),
                1,
                "--extra-files",
                "a new claim holds only the backup",
            ),
        },
        Case {
            name: "extra-files-kept-with-paths",
            spec: with(
                spec("b1", &["data"]),
                json!({"paths": {"include": ["db"]}, "extraFiles": "Keep"}),
            ),
            direct: failed(
                "spec.extraFiles",
                "deletes under the paths only with spec.paths.mirror",
            ),
            // Refused by the flags themselves: a path restore takes no --extra-files.
            cli: cli_line(
                &format!("--from-backup b1 --pvc {data} --path db --extra-files keep"),
                2,
                "--extra-files",
                "cannot be used with",
            ),
        },
        Case {
            name: "method-unknown",
            spec: with(spec("b1", &["solo"]), json!({"method": "Copy"})),
            direct: Direct::Refused {
                field: "spec.method",
            },
            cli: cli_line(
                &format!("--from-backup b1 --pvc {solo} --method copy"),
                2,
                "--method",
                "invalid value 'copy'",
            ),
        },
        Case {
            name: "staged-unbound-without-candidates",
            spec: with(spec("b1", &["unbound"]), json!({"method": "Staged"})),
            direct: failed("spec.candidateNodes[", "binds on first consumer"),
            cli: cli_line(
                &format!("--from-backup b1 --pvc {} --method staged", p("unbound")),
                1,
                &format!("--candidate-nodes {}=...", p("unbound")),
                "binds on first consumer",
            ),
        },
        Case {
            name: "switch-in-place",
            spec: with(spec("b1", &["data"]), json!({"switchWorkloads": true})),
            direct: failed(
                "spec.switchWorkloads",
                "workloads are switched only onto the new claims of a restore into new claims",
            ),
            cli: cli(
                &["--from-backup", "b1", "--pvc", &data, "--switch-workloads"],
                1,
                "--switch-workloads",
                "workloads are switched only onto the new claims of a restore into new claims, and --target is in-place; add --target new-claim, or leave out --switch-workloads",
            ),
        },
        Case {
            name: "switch-label-on-a-workload-without-the-claim",
            spec: with(
                spec("b1", &["solo"]),
                json!({"target": "NewClaim", "switchWorkloads": true}),
            ),
            direct: failed(
                "spec.switchWorkloads",
                "carries the label refill.dev/switch-claim=solo, but its pod template does not name PVC solo among its volumes",
            ),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--target",
                    "new-claim",
                    "--switch-workloads",
                ],
                1,
                "--switch-workloads: Deployment",
                "carries the label refill.dev/switch-claim=solo, but its pod template does not name PVC solo among its volumes",
            ),
        },
        Case {
            name: "bare-pod-under-scale-down",
            spec: spec("b1", &["extra"]),
            direct: failed(
                "spec.consumers",
                "it cannot be scaled down; set spec.consumers to Detach",
            ),
            cli: cli(
                &["--from-backup", "b1", "--pvc", &p("extra")],
                1,
                "--consumers",
                "it cannot be scaled down; set --consumers to Detach",
            ),
        },
        Case {
            name: "helper-image-with-space",
            spec: with(
                spec("b1", &["solo"]),
                json!({"restoreHelper": {"image": "velero/velero :v1.17"}}),
            ),
            direct: failed(
                "spec.restoreHelper.image",
                "holds a space or control character",
            ),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--restore-helper-image",
                    "velero/velero :v1.17",
                ],
                1,
                "--restore-helper-image",
                "holds a space or control character",
            ),
        },
        Case {
            name: "helper-image-invalid",
            spec: with(
                spec("b1", &["solo"]),
                json!({"restoreHelper": {"image": "Velero/Velero:v1.17"}}),
            ),
            direct: failed("spec.restoreHelper.image", "is not an image reference"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--restore-helper-image",
                    "velero/velero:",
                ],
                1,
                "--restore-helper-image",
                "is not an image reference",
            ),
        },
        Case {
            name: "helper-resources-unparsable",
            spec: with(
                spec("b1", &["solo"]),
                json!({"restoreHelper": {"resources": {"requests": {"cpu": "lots"}}}}),
            ),
            direct: failed(
                "spec.restoreHelper.resources.requests.cpu",
                "\"lots\" is not a quantity",
            ),
            cli: None,
        },
        Case {
            name: "helper-command-empty",
            spec: with(
                spec("b1", &["solo"]),
                json!({"restoreHelper": {"command": []}}),
            ),
            direct: failed("spec.restoreHelper.command", "is empty"),
            cli: None,
        },
        Case {
            name: "stand-in-image-empty",
            spec: with(spec("b1", &["solo"]), json!({"standInImage": ""})),
            direct: failed("spec.standInImage", "the image is empty"),
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &p("solo"),
                    "--stand-in-image",
                    "",
                ],
                1,
                "--stand-in-image",
                "the image is empty",
            ),
        },
        Case {
            name: "cli-bad-selector",
            spec: Value::Null,
            direct: Direct::Skip,
            cli: cli(
                &["--from-backup", "b1", "--selector", "app in ("],
                1,
                "--selector",
                "--selector",
            ),
        },
        Case {
            name: "cli-unknown-on-failure",
            spec: Value::Null,
            direct: Direct::Skip,
            cli: cli(
                &[
                    "--from-backup",
                    "b1",
                    "--pvc",
                    &data,
                    "--on-failure",
                    "maybe",
                ],
                2,
                "--on-failure",
                "invalid value 'maybe'",
            ),
        },
    ]
}

#[tokio::test]
async fn bad_input_is_refused_by_field_and_changes_nothing() -> Result<()> {
    run_test("bad-input", |env| async move {
        let s = Scene::new(env, TIMEOUT).await?;
        setup(&s).await?;
        let _controller = s.controller().await?;
        let before = s.versions().await?;

        let cases = cases(&s.ns);
        ensure!(cases.len() >= 25, "only {} cases", cases.len());
        let mut created = Vec::new();
        let mut failures = Vec::new();
        for case in &cases {
            let direct = direct(&s.client, &s.ns, case).await;
            let by_cli = by_cli(&s.env, case).await;
            for (path, outcome) in [("DataRestore", direct), ("CLI", by_cli)] {
                match outcome {
                    Ok(Some(name)) => created.push(name),
                    Ok(None) => {}
                    Err(e) => failures.push(format!("{} ({path}): {e:#}", case.name)),
                }
            }
            let now = s.versions().await?;
            if now != before {
                failures.push(format!(
                    "{}: objects changed:\n{}",
                    case.name,
                    fixture::changed_versions(&before, &now)
                ));
            }
        }
        ensure!(
            failures.is_empty(),
            "{} failures:\n{}",
            failures.len(),
            failures.join("\n\n")
        );

        let left: Vec<String> = s
            .env
            .api::<DataRestore>()
            .list(&ListParams::default())
            .await?
            .iter()
            .map(|d| d.name_any())
            .collect();
        created.sort();
        let mut left_sorted = left.clone();
        left_sorted.sort();
        ensure!(
            left_sorted == created,
            "the DataRestores are not exactly the directly applied ones: {left:?}"
        );
        audit_shows_no_writes(&s.env).await
    })
    .await
}

/// Applies the case's DataRestore and checks what the apiserver and the controller make
/// of it. Returns the name when it was stored.
async fn direct(client: &Client, ns: &str, case: &Case) -> Result<Option<String>> {
    let name = format!("dr-{}", case.name);
    let resource = ApiResource::erase::<DataRestore>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": refill::api::API_VERSION,
        "kind": "DataRestore",
        "metadata": {"name": name, "namespace": ns},
        "spec": case.spec,
    }))?;
    match &case.direct {
        Direct::Skip => Ok(None),
        Direct::Refused { field } => match api.create(&PostParams::default(), &object).await {
            Ok(_) => bail!("the apiserver stored it"),
            Err(kube::Error::Api(e)) => {
                ensure!(e.code == 422, "refused with {e:?}");
                eprintln!("[{}] the apiserver refused it: {}", case.name, e.message);
                ensure!(
                    e.message.contains(field),
                    "the refusal does not name {field}: {}",
                    e.message
                );
                Ok(None)
            }
            Err(e) => Err(e.into()),
        },
        Direct::Failed { field, says } => {
            api.create(&PostParams::default(), &object).await?;
            let dr = fixture::wait_finished(client, ns, &name, TIMEOUT).await?;
            let status = dr.status.unwrap_or_default();
            ensure!(
                status.phase == Phase::Failed,
                "ended {:?}: {status:#?}",
                status.phase
            );
            let naming: Vec<&String> = status
                .errors
                .iter()
                .filter(|e| e.starts_with(field) && e.contains(says))
                .collect();
            ensure!(
                naming.len() == 1,
                "expected one error starting with '{field}' and holding '{says}', got {:#?}",
                status.errors
            );
            eprintln!("[{}] status.errors: {:?}", case.name, status.errors);
            let stalled = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Stalled")
                .context("no Stalled condition")?;
            ensure!(
                stalled.status == "True"
                    && stalled.message.starts_with("spec.")
                    && status.errors.first() == Some(&stalled.message),
                "Stalled does not give the first error: {stalled:?}"
            );
            ensure!(
                status.volumes.is_empty() && status.consumers.is_empty(),
                "it went further than validation: {status:#?}"
            );
            Ok(Some(name))
        }
    }
}

/// Runs `refill restore create` with the case's flags and checks its answer.
async fn by_cli(env: &TestEnv, case: &Case) -> Result<Option<String>> {
    let Some(cli) = &case.cli else {
        return Ok(None);
    };
    let name = format!("cli-{}", case.name);
    let mut args = vec!["restore".to_string(), "create".into(), name.clone()];
    args.extend(cli.args.iter().cloned());
    let run = refill(env, &args).await?;
    ensure!(
        run.code == cli.code,
        "exited {} instead of {}: {run:#?}",
        run.code,
        cli.code
    );
    ensure!(run.stdout.is_empty(), "printed to stdout: {run:#?}");
    let stderr = &run.stderr;
    eprintln!("[{}] refill exited {}: {stderr}", case.name, run.code);
    ensure!(
        stderr.contains(&cli.flag),
        "the message does not name {}: {stderr}",
        cli.flag
    );
    ensure!(
        stderr.matches(cli.says).count() == 1,
        "'{}' is not in the message exactly once: {stderr}",
        cli.says
    );
    ensure!(stderr.starts_with("error: "), "{stderr}");
    ensure!(
        stderr.matches("error: ").count() == 1 || cli.code == 2,
        "more than one error printed: {stderr}"
    );
    let stored = env.api::<DataRestore>().get_opt(&name).await?;
    ensure!(stored.is_none(), "the CLI created {name}");
    Ok(None)
}

async fn refill(env: &TestEnv, args: &[String]) -> Result<Run> {
    refill_as(env, &env.cluster.kubeconfig, args).await
}

/// Runs the binary with the kubeconfig `kubeconfig`, the test namespace as Velero's.
async fn refill_as(env: &TestEnv, kubeconfig: &std::path::Path, args: &[String]) -> Result<Run> {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_refill"));
    let run = fixture::run_refill(bin, kubeconfig, env.namespace(), args);
    tokio::time::timeout(TIMEOUT, run)
        .await
        .context("refill did not end within a minute")?
}

/// The world the cases run against:
/// - `data` (mounted by Deployment `web`), `extra` (mounted by the bare pod `bare`),
///   `solo`, `snapshotted` and `halfway`: bound claims on local PVs;
/// - `unbound`: a claim of a WaitForFirstConsumer class, with no volume yet;
/// - backup `b1` with Completed PodVolumeBackups of data, extra, unbound, solo and of
///   `gone` (a claim deleted since), and a Failed one of `halfway`; `snapshotted` is
///   not in it (as if its volume had been snapshotted instead);
/// - backup `running` (InProgress), backup `broken` (Failed), and schedule `weekly`
///   whose only backup failed.
async fn setup(s: &Scene) -> Result<()> {
    for (claim, node) in [
        ("data", "node-a"),
        ("extra", "node-a"),
        ("solo", "node-b"),
        ("snapshotted", "node-b"),
        ("halfway", "node-c"),
    ] {
        s.volume(claim, node, &[]).await?;
    }
    s.unbound_claim("unbound").await?;
    s.deployment("web", 1, &["data"]).await?;
    s.bare_pod("bare", &["extra"]).await?;
    // Labelled to be switched off a claim its template does not mount (a label put on
    // the wrong workload).
    let mut stray = fixture::pod_template("stray", &["extra"]);
    stray["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    fixture::deployment_of(&s.client, &s.ns, "stray", 0, stray).await?;
    s.env
        .api::<k8s_openapi::api::apps::v1::Deployment>()
        .patch(
            "stray",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {labels::SWITCH_CLAIM: "solo"}}})),
        )
        .await?;

    let volume = |pvc: &'static str| s.backed_up(pvc, "app-0", &[("f", b"backed up")]);
    let b1: Vec<BackedUpVolume> = ["data", "extra", "unbound", "solo", "gone", "halfway"]
        .into_iter()
        .map(volume)
        .collect();
    s.backup("b1", &b1).await?;
    s.env
        .api::<PodVolumeBackup>()
        .patch(
            "b1-5",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Failed", "message": "node agent restarted"}}),
            ),
        )
        .await?;
    let backups = s.env.api::<Backup>();
    for (name, phase) in [
        ("running", "InProgress"),
        ("broken", "Failed"),
        ("weekly-1", "Failed"),
    ] {
        s.backup(name, &[volume("solo")]).await?;
        backups
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": phase}})),
            )
            .await?;
    }
    backups
        .patch(
            "weekly-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {labels::SCHEDULE_NAME: "weekly"}}})),
        )
        .await?;
    // Velero's schema requires a template, which refill's Schedule type does not
    // carry (refill only reads Schedules): created as a dynamic object.
    let schedule: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1", "kind": "Schedule",
        "metadata": {"name": "weekly", "namespace": s.ns},
        "spec": {"schedule": "@weekly", "template": {"includedNamespaces": [s.ns]}},
    }))?;
    Api::<DynamicObject>::namespaced_with(
        s.client.clone(),
        &s.ns,
        &kube::api::ApiResource::erase::<Schedule>(&()),
    )
    .create(&PostParams::default(), &schedule)
    .await?;
    // Whatever the control plane still does to the new objects (a Deployment's status,
    // a pod's conditions) settles before the first snapshot of versions.
    let mut last = s.versions().await?;
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = s.versions().await?;
        if now == last {
            return Ok(());
        }
        last = now;
    }
    bail!("the namespace's objects did not settle in 30s")
}

/// Every write refill made about this namespace, from the apiserver's audit log: the
/// CLI made none; the controller wrote only the DataRestores (finalizer, status) and
/// events about them. A request the CLI makes last marks where the log is complete.
async fn audit_shows_no_writes(env: &TestEnv) -> Result<()> {
    let ns = env.namespace();
    let marker = "audit-marker";
    let run = refill(env, &["restore".into(), "get".into(), marker.into()]).await?;
    ensure!(run.code == 1, "{run:#?}");
    let entries = wait_for(
        "the CLI's last request in the audit log",
        TIMEOUT,
        || async {
            let entries = refill_requests(env)?;
            let marked = entries.iter().any(|e| {
                e["userAgent"] == refill::cli::USER_AGENT && e["objectRef"]["name"] == marker
            });
            Ok(marked.then_some(entries))
        },
    )
    .await?;
    let controller_read = entries
        .iter()
        .any(|e| e["userAgent"] == refill::controller::USER_AGENT);
    ensure!(
        controller_read,
        "no request of the controller in the audit log"
    );
    let writes: Vec<&Value> = entries
        .iter()
        .filter(|e| !matches!(e["verb"].as_str(), Some("get" | "list" | "watch")))
        .filter(|e| {
            let by_controller = e["userAgent"] == refill::controller::USER_AGENT;
            let resource = e["objectRef"]["resource"].as_str().unwrap_or_default();
            let allowed = by_controller
                && e["objectRef"]["namespace"] == ns
                && (resource == "datarestores" || resource == "events");
            !allowed
        })
        .collect();
    ensure!(writes.is_empty(), "refill wrote: {writes:#?}");
    Ok(())
}

/// refill's requests (CLI and controller) about the test namespace or its PVs.
fn refill_requests(env: &TestEnv) -> Result<Vec<Value>> {
    let ns = env.namespace();
    let log = std::fs::read_to_string(env.cluster.audit_log_path())?;
    Ok(log
        .lines()
        .filter(|l| l.contains("refill-cli/") || l.contains("refill-controller/"))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["userAgent"] == refill::cli::USER_AGENT
                || e["userAgent"] == refill::controller::USER_AGENT
        })
        .filter(|e| {
            let object = &e["objectRef"];
            object["namespace"] == ns
                || (object["namespace"].is_null()
                    && object["name"].as_str().is_some_and(|n| n.starts_with(ns)))
        })
        .collect())
}

/// A person whose RBAC lets them create restores and read Velero's objects and the
/// claims, but not the PersistentVolumes validation also reads: the check cannot be
/// finished, which says nothing about the request, so the restore is created with one
/// warning. What the check could read and refuse is still refused.
#[tokio::test]
async fn a_read_the_user_may_not_make_warns_and_creates() -> Result<()> {
    run_test("bad-input-rbac", |env| async move {
        let s = Scene::new(env, TIMEOUT).await?;
        let (env, ns) = (&s.env, &s.ns);
        s.volume("data", "node-a", &[]).await?;
        s.backup(
            "b1",
            &[s.backed_up("data", "app-0", &[("f", b"backed up")])],
        )
        .await?;

        let kubeconfig = limited_user(env, &s.scratch).await?;
        let pvc = format!("{ns}/data");
        let args = |name: &str, pvc: &str| -> Vec<String> {
            [
                "restore",
                "create",
                name,
                "--from-backup",
                "b1",
                "--pvc",
                pvc,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        };
        let run = refill_as(env, &kubeconfig, &args("r1", &pvc)).await?;
        ensure!(run.code == 0, "{run:#?}");
        ensure!(run.stdout.starts_with("restore \"r1\" created"), "{run:#?}");
        let warning = "warning: could not check the request before creating it (";
        ensure!(run.stderr.matches(warning).count() == 1, "{run:#?}");
        ensure!(run.stderr.contains("forbidden"), "{run:#?}");
        ensure!(env.api::<DataRestore>().get_opt("r1").await?.is_some());

        let missing = format!("{ns}/missing");
        let run = refill_as(env, &kubeconfig, &args("r2", &missing)).await?;
        ensure!(run.code == 1, "{run:#?}");
        ensure!(
            run.stderr
                .contains(&format!("--pvc {missing}: PVC {missing} is not in backup")),
            "{run:#?}"
        );
        ensure!(env.api::<DataRestore>().get_opt("r2").await?.is_none());
        Ok(())
    })
    .await
}

/// A ServiceAccount that may create restores and read backups, PodVolumeBackups,
/// schedules and claims in the test namespace, and nothing else; returns the path of a
/// kubeconfig that acts as it.
async fn limited_user(env: &TestEnv, dir: &std::path::Path) -> Result<PathBuf> {
    let ns = env.namespace();
    env.create::<k8s_openapi::api::core::v1::ServiceAccount>(
        json!({"metadata": {"name": "operator"}}),
    )
    .await?;
    env.create::<k8s_openapi::api::rbac::v1::Role>(json!({
        "metadata": {"name": "operator"},
        "rules": [
            {"apiGroups": ["refill.dev"], "resources": ["datarestores"], "verbs": ["get", "list", "create"]},
            {"apiGroups": ["velero.io"], "resources": ["backups", "podvolumebackups", "schedules"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list"]},
        ],
    }))
    .await?;
    env.create::<k8s_openapi::api::rbac::v1::RoleBinding>(json!({
        "metadata": {"name": "operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": ns}],
    }))
    .await?;
    let token = refill_e2e::cluster::service_account_token(&env.client, ns, "operator").await?;
    let mut config: yaml_serde::Value =
        yaml_serde::from_str(&std::fs::read_to_string(&env.cluster.kubeconfig)?)?;
    let users = config["users"]
        .as_sequence_mut()
        .context("the admin kubeconfig has no users")?;
    for user in users {
        user["user"] = yaml_serde::to_value(json!({"token": token}))?;
    }
    let path = dir.join("operator.kubeconfig");
    std::fs::write(&path, yaml_serde::to_string(&config)?)?;
    Ok(path)
}
