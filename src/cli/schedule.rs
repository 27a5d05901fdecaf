//! `refill schedule create|get|describe|pause|unpause|delete`: DataRestoreSchedules,
//! which make DataRestores from a template on each new backup of a Velero Schedule
//! and/or at cron times. The template is built from the flags of `restore create`.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::api::{
    DEFAULT_HISTORY_LIMIT, DataRestore, DataRestoreSchedule, DataRestoreScheduleSpec,
    DataRestoreSpec, Schedule,
};
use crate::controller::schedule_spec_errors;
use crate::labels;

use super::args::{OutputFormat, ScheduleCommand, ScheduleCreateArgs};
use super::client::Ctx;
use super::create::{bulleted, check_exists, check_source, flag_words, not_valid};
use super::dry_run::name_is_free;
use super::errors::{CliError, Kind, Result, Target};
use super::format::{self, Table, age, from_now, or_dash, when, when_next};
use super::get::{self, backup_of, newest_first};
use super::{how, output, selector, spec};

pub(super) async fn run(ctx: &Ctx, command: &ScheduleCommand) -> Result<()> {
    let kind = Kind::DataRestoreSchedule;
    match command {
        ScheduleCommand::Create(args) => create(ctx, args).await,
        ScheduleCommand::Get(args) => {
            get::show(ctx, kind, args.name.as_deref(), args.output, table).await
        }
        ScheduleCommand::Describe(args) => describe(ctx, &args.name, args.output).await,
        ScheduleCommand::Pause(args) => set_paused(ctx, &args.name, true).await,
        ScheduleCommand::Unpause(args) => set_paused(ctx, &args.name, false).await,
        ScheduleCommand::Delete(args) => delete(ctx, &args.name).await,
    }
}

async fn create(ctx: &Ctx, args: &ScheduleCreateArgs) -> Result<()> {
    let schedule = spec::build_schedule(args, &ctx.namespace)
        .map_err(|errors| not_valid("restore schedule", &errors))?;
    let errors = flag_errors(&schedule.spec);
    if !errors.is_empty() {
        return Err(CliError::new(bulleted(
            &format!(
                "restore schedule \"{name}\" would be refused",
                name = args.name
            ),
            &errors,
        )));
    }
    let mut warnings = check_source(ctx, &schedule.spec.template).await?;
    if let Some(followed) = &schedule.spec.velero_schedule {
        check_exists::<Schedule>(
            ctx,
            Kind::Schedule,
            followed,
            "--follow-schedule",
            &mut warnings,
        )
        .await?;
    }
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    let name = &args.name;
    let ns = &ctx.namespace;
    let kind = Kind::DataRestoreSchedule;
    if args.dry_run {
        name_is_free::<DataRestoreSchedule>(ctx, kind, name).await?;
        let format = args.output.unwrap_or(OutputFormat::Yaml);
        print!("{}", output::render(&schedule, format)?);
        return Ok(());
    }
    let created = ctx
        .api::<DataRestoreSchedule>()
        .create(&PostParams::default(), &schedule)
        .await
        .map_err(|e| ctx.error(&e, Target::one(kind, name, ns)))?;
    match args.output {
        Some(format) => print!("{}", output::render(&created, format)?),
        None => println!("{}", created_line(&created.spec, name, ns)),
    }
    Ok(())
}

/// What `schedule create` says once the schedule is there.
fn created_line(spec: &DataRestoreScheduleSpec, name: &str, ns: &str) -> String {
    let paused = if spec.paused {
        format!(" once unpaused (refill schedule unpause {name})")
    } else {
        String::new()
    };
    format!(
        "restore schedule \"{name}\" created in namespace \"{ns}\": it restores {}{paused}; see its restores with: refill schedule describe {name} -n {ns}",
        triggers(spec)
    )
}

/// When the schedule starts a restore, in words.
fn triggers(spec: &DataRestoreScheduleSpec) -> String {
    let follows = spec
        .velero_schedule
        .as_ref()
        .map(|s| format!("each new backup of Velero schedule \"{s}\""));
    let cron = spec.cron.as_ref().map(|c| format!("at \"{c}\" (UTC)"));
    match (follows, cron) {
        (Some(f), Some(c)) => format!("{f}, and {c}"),
        (Some(one), None) | (None, Some(one)) => one,
        (None, None) => "never (it names neither a Velero schedule nor a cron time)".into(),
    }
}

/// The controller's checks of the schedule, each mistake named by the flag that sets
/// its field.
fn flag_errors(spec: &DataRestoreScheduleSpec) -> Vec<String> {
    schedule_spec_errors(spec)
        .iter()
        .map(|e| schedule_flag_words(spec, e))
        .collect()
}

/// A message of the schedule's checks with each field named by the flag that sets it:
/// the schedule's own fields here, the template's as `restore create` names them.
fn schedule_flag_words(spec: &DataRestoreScheduleSpec, message: &str) -> String {
    let mut text = message.to_string();
    for (field, flag) in [
        ("spec.veleroSchedule", "--follow-schedule"),
        ("spec.cron", "--cron"),
        ("spec.template: ", ""),
        ("spec.template.", "spec."),
        ("template.backupName", "--from-backup"),
        ("template.scheduleName", "--from-schedule"),
    ] {
        text = text.replace(field, flag);
    }
    flag_words(&spec.template, &text)
}

pub(super) fn table(items: &[DataRestoreSchedule], now: Timestamp) -> String {
    let mut table = Table::new(&[
        "NAME",
        "FOLLOWS",
        "CRON",
        "PAUSED",
        "LAST BACKUP",
        "LAST RESULT",
        "ACTIVE",
        "NEXT RUN",
        "AGE",
    ]);
    for s in items {
        let status = s.status.clone().unwrap_or_default();
        table.row(vec![
            s.name_any(),
            or_dash(s.spec.velero_schedule.as_deref()),
            or_dash(s.spec.cron.as_deref()),
            s.spec.paused.to_string(),
            or_dash(status.last_backup.as_deref()),
            or_dash(status.last_result.map(|p| format!("{p:?}")).as_deref()),
            or_dash(status.active.as_deref()),
            from_now(status.next_run_time.as_ref(), now),
            age(s.metadata.creation_timestamp.as_ref(), now),
        ]);
    }
    table.render("")
}

async fn describe(ctx: &Ctx, name: &str, format: Option<OutputFormat>) -> Result<()> {
    let schedule: DataRestoreSchedule = ctx.get(Kind::DataRestoreSchedule, name).await?;
    if let Some(format) = format {
        print!("{}", output::render(&schedule, format)?);
        return Ok(());
    }
    let selector = format!(
        "{}={}",
        labels::SCHEDULE_UID,
        schedule.uid().unwrap_or_default()
    );
    let restores = ctx
        .api::<DataRestore>()
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| ctx.error(&e, Target::all(Kind::DataRestore, &ctx.namespace)))?
        .items;
    print!("{}", render(&schedule, &restores, Timestamp::now()));
    Ok(())
}

/// Which PVCs each run restores, in the flags' words.
fn selection(template: &DataRestoreSpec) -> String {
    let mut parts = Vec::new();
    if !template.pvcs.is_empty() {
        parts.push(format!("--pvc {}", template.pvcs.join(", ")));
    }
    if !template.included_namespaces.is_empty() {
        parts.push(format!(
            "--include-namespaces {}",
            template.included_namespaces.join(",")
        ));
    }
    if let Some(s) = &template.selector {
        parts.push(format!("--selector '{}'", selector::text(s)));
    }
    if let Some(paths) = &template.paths {
        parts.push(format!("--path {}", paths.include.join(", ")));
    }
    match parts.is_empty() {
        true => "-".into(),
        false => parts.join("; "),
    }
}

/// The backup each run restores, as the spec says.
fn source(spec: &DataRestoreScheduleSpec) -> String {
    let template = &spec.template;
    match (&template.backup_name, &template.schedule_name) {
        (Some(b), _) => format!("backup \"{b}\""),
        (None, Some(s)) => format!("the newest Completed backup of Velero schedule \"{s}\""),
        (None, None) if spec.velero_schedule.is_some() => "the backup it was started for".into(),
        (None, None) => "-".into(),
    }
}

/// The whole description: spec, status, conditions and the restores made.
pub(super) fn render(
    schedule: &DataRestoreSchedule,
    restores: &[DataRestore],
    now: Timestamp,
) -> String {
    let spec = &schedule.spec;
    let status = schedule.status.clone().unwrap_or_default();
    let name = schedule.name_any();
    let limit = |l: Option<u32>| l.unwrap_or(DEFAULT_HISTORY_LIMIT);
    let mut head = vec![
        ("Name", name.clone()),
        ("Namespace", schedule.namespace().unwrap_or_default()),
        ("Follows", or_dash(spec.velero_schedule.as_deref())),
        (
            "Cron",
            spec.cron
                .as_ref()
                .map_or_else(|| "-".into(), |c| format!("{c} (UTC)")),
        ),
        (
            "Paused",
            match spec.paused {
                true => {
                    format!("yes: no restore starts; resume with: refill schedule unpause {name}")
                }
                false => "no".into(),
            },
        ),
        (
            "History",
            format!(
                "keeps {} completed, {} failed",
                limit(spec.successful_history_limit),
                limit(spec.failed_history_limit)
            ),
        ),
        ("Restores", selection(&spec.template)),
        ("From", source(spec)),
        (
            "Consumers",
            format!(
                "{:?}, on failure {:?}",
                spec.template.consumers, spec.template.on_failure
            ),
        ),
        ("Method", how::method(&spec.template)),
        ("Extra files", how::extra_files(&spec.template)),
        (
            "Created",
            when(schedule.metadata.creation_timestamp.as_ref(), now),
        ),
        ("Last backup", or_dash(status.last_backup.as_deref())),
        ("Last restore", or_dash(status.last_restore.as_deref())),
        (
            "Last result",
            or_dash(status.last_result.map(|p| format!("{p:?}")).as_deref()),
        ),
        ("Last run", when(status.last_run_time.as_ref(), now)),
        ("Next run", when_next(status.next_run_time.as_ref(), now)),
        ("Active", or_dash(status.active.as_deref())),
    ];
    if schedule.status.is_none() {
        head.push((
            "Status",
            "- (no controller has picked it up yet; is `refill controller` running for this namespace?)".into(),
        ));
    }
    if schedule.metadata.deletion_timestamp.is_some() {
        head.push(("Deleting", "yes, with the restores it made".into()));
    }
    let mut out = format::fields(head);

    if !status.errors.is_empty() {
        out += "\nErrors:\n";
        for error in &status.errors {
            out += &format!("  - {error}\n");
        }
    }

    out += "\nConditions:\n";
    out += &format::conditions_table(&status.conditions, now);

    out += "\nRestores:\n";
    if restores.is_empty() {
        out += "  none yet\n";
    } else {
        let mut sorted = restores.to_vec();
        newest_first(&mut sorted);
        let mut table = Table::new(&["NAME", "BACKUP", "PHASE", "VOLUMES", "STARTED", "COMPLETED"]);
        for dr in &sorted {
            let s = dr.status.clone().unwrap_or_default();
            table.row(vec![
                dr.name_any(),
                backup_of(dr),
                dr.status
                    .as_ref()
                    .map_or_else(|| "-".into(), |s| format!("{:?}", s.phase)),
                or_dash(s.summary.as_deref()),
                age(s.start_time.as_ref(), now),
                age(s.completion_time.as_ref(), now),
            ]);
        }
        out += &table.render("  ");
    }
    out
}

async fn set_paused(ctx: &Ctx, name: &str, paused: bool) -> Result<()> {
    let target = Target::one(Kind::DataRestoreSchedule, name, &ctx.namespace);
    let patch = json!({ "spec": { "paused": paused } });
    let schedule = ctx
        .api::<DataRestoreSchedule>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| ctx.error(&e, target))?;
    println!("{}", paused_line(&schedule));
    Ok(())
}

/// What `pause` and `unpause` did, from the schedule as patched.
fn paused_line(schedule: &DataRestoreSchedule) -> String {
    let name = schedule.name_any();
    let active = schedule.status.as_ref().and_then(|s| s.active.as_deref());
    if schedule.spec.paused {
        let mut line = format!(
            "restore schedule \"{name}\" paused: no new restore starts until: refill schedule unpause {name}"
        );
        if let Some(active) = active {
            line += &format!("; restore \"{active}\" goes on");
        }
        line
    } else {
        format!(
            "restore schedule \"{name}\" unpaused: it restores {} again",
            triggers(&schedule.spec)
        )
    }
}

async fn delete(ctx: &Ctx, name: &str) -> Result<()> {
    let target = Target::one(Kind::DataRestoreSchedule, name, &ctx.namespace);
    ctx.api::<DataRestoreSchedule>()
        .delete(name, &DeleteParams::default())
        .await
        .map_err(|e| ctx.error(&e, target))?;
    println!(
        "restore schedule \"{name}\" deleted; the restores it made go with it (one still running first rolls back and brings its consumers back)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DataRestoreScheduleStatus, DataRestoreStatus, Phase};
    use crate::cli::format::at;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};

    fn sample() -> DataRestoreSchedule {
        let mut schedule = DataRestoreSchedule::new(
            "standby",
            DataRestoreScheduleSpec {
                template: DataRestoreSpec {
                    pvcs: vec!["shop/data-db-0".into()],
                    selector: Some(LabelSelector {
                        match_labels: Some([("app".to_string(), "db".to_string())].into()),
                        match_expressions: None,
                    }),
                    ..DataRestoreSpec::default()
                },
                velero_schedule: Some("nightly".into()),
                cron: Some("0 3 * * *".into()),
                successful_history_limit: Some(5),
                ..DataRestoreScheduleSpec::default()
            },
        );
        schedule.metadata.namespace = Some("velero".into());
        schedule.metadata.creation_timestamp = Some(at("2026-01-01T00:00:00Z"));
        schedule.status = Some(DataRestoreScheduleStatus {
            last_backup: Some("nightly-20260102".into()),
            last_restore: Some("standby-b2".into()),
            last_result: Some(Phase::Completed),
            last_run_time: Some(at("2026-01-02T11:00:00Z")),
            next_run_time: Some(at("2026-01-03T03:00:00Z")),
            active: Some("standby-b2".into()),
            errors: vec!["spec.template.pvcs[0]: gone".into()],
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "Completed".into(),
                message: "restore standby-b1 completed".into(),
                last_transition_time: at("2026-01-02T10:00:00Z"),
                observed_generation: None,
            }],
            ..DataRestoreScheduleStatus::default()
        });
        schedule
    }

    fn restore(name: &str, created: &str, phase: Phase, summary: Option<&str>) -> DataRestore {
        let mut dr = DataRestore::new(name, DataRestoreSpec::default());
        dr.metadata.creation_timestamp = Some(at(created));
        dr.status = Some(DataRestoreStatus {
            phase,
            backup_name: Some(format!("{name}-backup")),
            summary: summary.map(Into::into),
            start_time: Some(at(created)),
            ..DataRestoreStatus::default()
        });
        dr
    }

    #[test]
    fn table_shows_triggers_status_and_next_run() {
        let now: Timestamp = "2026-01-02T12:00:00Z".parse().unwrap();
        let mut bare = DataRestoreSchedule::new(
            "reset",
            DataRestoreScheduleSpec {
                cron: Some("*/5 * * * *".into()),
                paused: true,
                ..DataRestoreScheduleSpec::default()
            },
        );
        bare.metadata.creation_timestamp = Some(at("2026-01-02T11:59:00Z"));
        let mut items = vec![sample(), bare];
        newest_first(&mut items);
        assert_eq!(
            table(&items, now),
            "NAME      FOLLOWS   CRON          PAUSED   LAST BACKUP        LAST RESULT   ACTIVE       NEXT RUN   AGE\n\
             reset     -         */5 * * * *   true     -                  -             -            -          60s\n\
             standby   nightly   0 3 * * *     false    nightly-20260102   Completed     standby-b2   in 15h     36h\n"
        );
    }

    #[test]
    fn describe_shows_spec_status_conditions_and_restores_newest_first() {
        let now: Timestamp = "2026-01-02T12:00:00Z".parse().unwrap();
        let restores = [
            restore(
                "standby-b1",
                "2026-01-01T03:00:00Z",
                Phase::Completed,
                Some("1/1"),
            ),
            restore("standby-b2", "2026-01-02T11:00:00Z", Phase::Restoring, None),
        ];
        let text = render(&sample(), &restores, now);
        assert!(
            text.starts_with(
                "Name:           standby\n\
                 Namespace:      velero\n\
                 Follows:        nightly\n\
                 Cron:           0 3 * * * (UTC)\n\
                 Paused:         no\n\
                 History:        keeps 5 completed, 3 failed\n\
                 Restores:       --pvc shop/data-db-0; --selector 'app=db'\n\
                 From:           the backup it was started for\n\
                 Consumers:      ScaleDown, on failure Resume\n\
                 Method:         Direct — the app stops, then the node agent writes the backup into each PVC: it is down for the whole restore\n\
                 Extra files:    deleted (each volume will hold exactly the backup)\n"
            ),
            "{text}"
        );
        for line in [
            "Last backup:    nightly-20260102\n",
            "Last result:    Completed\n",
            "Last run:       60m ago (2026-01-02T11:00:00Z)\n",
            "Next run:       in 15h (2026-01-03T03:00:00Z)\n",
            "Active:         standby-b2\n",
            "Errors:\n  - spec.template.pvcs[0]: gone\n",
            "  Ready   True     Completed   120m   restore standby-b1 completed\n",
        ] {
            assert!(text.contains(line), "{line:?} in:\n{text}");
        }
        assert!(
            text.ends_with(
                "Restores:\n\
                 \x20 NAME         BACKUP              PHASE       VOLUMES   STARTED   COMPLETED\n\
                 \x20 standby-b2   standby-b2-backup   Restoring   -         60m       -\n\
                 \x20 standby-b1   standby-b1-backup   Completed   1/1       33h       -\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_new_schedule_says_no_controller_has_it() {
        let mut schedule = sample();
        schedule.status = None;
        schedule.spec.paused = true;
        let text = render(&schedule, &[], "2026-01-02T12:00:00Z".parse().unwrap());
        assert!(
            text.contains(
                "Paused:         yes: no restore starts; resume with: refill schedule unpause standby\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("Status:         - (no controller has picked it up yet"),
            "{text}"
        );
        assert!(text.contains("Conditions:\n  none\n"), "{text}");
        assert!(text.ends_with("Restores:\n  none yet\n"), "{text}");
    }

    #[test]
    fn the_controllers_checks_read_as_flags() {
        let mut spec = sample().spec;
        spec.velero_schedule = None;
        spec.cron = Some("every night".into());
        let words = flag_errors(&spec);
        assert_eq!(words.len(), 2, "{words:#?}");
        assert!(
            words[0].starts_with("--cron: \"every night\" is not a cron expression"),
            "{}",
            words[0]
        );
        assert_eq!(
            words[1],
            "with --cron alone, name what each run restores: --from-schedule (its newest Completed backup) or --from-backup"
        );

        let mut spec = sample().spec;
        spec.template.backup_name = Some("b1".into());
        spec.template.pvcs.clear();
        spec.template.selector = None;
        let words = flag_errors(&spec);
        assert_eq!(words.len(), 2, "{words:#?}");
        assert!(
            words[0].starts_with(
                "--from-backup and --from-schedule must be empty with --follow-schedule"
            ),
            "{}",
            words[0]
        );
        assert!(
            words[1].starts_with("--pvc, --include-namespaces and --selector are all missing"),
            "{}",
            words[1]
        );

        let mut spec = sample().spec;
        spec.template.target = crate::api::RestoreTarget::NewClaim;
        spec.template.method = crate::api::RestoreMethod::Staged;
        let words = flag_errors(&spec);
        assert_eq!(words.len(), 1, "{words:#?}");
        assert!(
            words[0].starts_with("--method: is staged, but --target is new-claim")
                && words[0]
                    .ends_with("leave out --method, or leave --target out to restore in place"),
            "{}",
            words[0]
        );
    }

    #[test]
    fn outputs_say_what_was_done() {
        let mut schedule = sample();
        assert_eq!(
            created_line(&schedule.spec, "standby", "velero"),
            "restore schedule \"standby\" created in namespace \"velero\": it restores each new backup of Velero schedule \"nightly\", and at \"0 3 * * *\" (UTC); see its restores with: refill schedule describe standby -n velero"
        );
        schedule.spec.paused = true;
        assert_eq!(
            paused_line(&schedule),
            "restore schedule \"standby\" paused: no new restore starts until: refill schedule unpause standby; restore \"standby-b2\" goes on"
        );
        schedule.spec.paused = false;
        schedule.spec.cron = None;
        assert_eq!(
            paused_line(&schedule),
            "restore schedule \"standby\" unpaused: it restores each new backup of Velero schedule \"nightly\" again"
        );
    }
}
