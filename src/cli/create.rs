//! `refill restore create` and `refill restore wait`.

use kube::api::PostParams;

use crate::api::{Backup, DataRestore, DataRestoreSpec, Schedule};
use crate::observe::reads::Reads;
use crate::plan::spec_errors;
use crate::validate::{self, ValidateError};

use super::args::{CreateArgs, OutputFormat, WaitArgs};
use super::client::{Ctx, Namespaced};
use super::errors::{CliError, Kind, Result, Target, is_missing_object, not_found, root_cause};
use super::{dry_run, output, progress, spec, wait};

pub(super) async fn create(ctx: &Ctx, args: &CreateArgs) -> Result<()> {
    let dr = spec::build(args, &ctx.namespace).map_err(|errors| not_valid("restore", &errors))?;
    let errors = spec_errors(&dr.spec);
    if !errors.is_empty() {
        return Err(refused(&dr, &errors));
    }
    let mut warnings = check_source(ctx, &dr.spec).await?;
    if args.dry_run {
        return dry_run::run(ctx, &dr, args.output).await;
    }
    // The backup read that failed above fails the same way in validation: say it once.
    for warning in preflight(ctx, &dr).await? {
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    let name = &args.name;
    let target = Target::one(Kind::DataRestore, name, &ctx.namespace);
    let created = ctx
        .api::<DataRestore>()
        .create(&PostParams::default(), &dr)
        .await
        .map_err(|e| ctx.error(&e, target))?;
    let created_line = format!(
        "restore \"{name}\" created in namespace \"{}\"",
        ctx.namespace
    );
    if !args.wait {
        match args.output {
            Some(format) => print!("{}", output::render(&created, format)?),
            None => println!(
                "{created_line}; follow it with: refill restore wait {name} -n {}",
                ctx.namespace
            ),
        }
        return Ok(());
    }
    eprintln!("{created_line}");
    follow(ctx, name, args.follow.pickup_timeout, args.output).await
}

/// `refill restore wait NAME`.
pub(super) async fn wait(ctx: &Ctx, args: &WaitArgs) -> Result<()> {
    follow(ctx, &args.name, args.follow.pickup_timeout, args.output).await
}

async fn follow(
    ctx: &Ctx,
    name: &str,
    pickup_timeout: std::time::Duration,
    format: Option<OutputFormat>,
) -> Result<()> {
    let mut reporter = progress::reporter(name);
    let ended = wait::follow(ctx, name, pickup_timeout, reporter.as_mut()).await?;
    if let Some(format) = format {
        print!("{}", output::render(&ended, format)?);
    }
    let summary = wait::outcome(&ended)?;
    if format.is_some() {
        eprintln!("{summary}");
    } else {
        println!("{summary}");
    }
    Ok(())
}

/// The backup or schedule must exist; saying so here beats a restore that fails later.
/// A read that fails otherwise (say, RBAC forbids it to this user) proves nothing about
/// the request: it becomes a warning, and the controller, which reads with its own
/// rights, decides.
pub(super) async fn check_source(ctx: &Ctx, spec: &DataRestoreSpec) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    if let Some(backup) = &spec.backup_name {
        check_exists::<Backup>(ctx, Kind::Backup, backup, "--from-backup", &mut warnings).await?;
    }
    if let Some(schedule) = &spec.schedule_name {
        check_exists::<Schedule>(
            ctx,
            Kind::Schedule,
            schedule,
            "--from-schedule",
            &mut warnings,
        )
        .await?;
    }
    Ok(warnings)
}

/// The object `flag` names must exist in Velero's namespace: an error naming the flag
/// if it does not, a warning in `warnings` if it could not be read.
pub(super) async fn check_exists<K: Namespaced>(
    ctx: &Ctx,
    kind: Kind,
    name: &str,
    flag: &str,
    warnings: &mut Vec<String>,
) -> Result<()> {
    match ctx.api::<K>().get(name).await {
        Ok(_) => Ok(()),
        Err(e) if is_missing_object(&e) => Err(CliError::new(format!(
            "{flag}: {}",
            not_found(Target::one(kind, name, &ctx.namespace))
        ))),
        Err(e) => {
            warnings.push(unchecked(ctx, &e)?);
            Ok(())
        }
    }
}

/// Runs the controller's own validation before anything is written. A request it
/// refuses is refused here, with its words, and nothing is created. A read that fails
/// (RBAC that lets this user create restores but not list pods, a timeout) says
/// nothing about the request: the restore is created anyway, with a warning, because
/// the controller validates again with its own rights and reports in the status.
async fn preflight(ctx: &Ctx, dr: &DataRestore) -> Result<Vec<String>> {
    match validate::plan(Reads::api(&ctx.client), dr).await {
        Ok(plan) => Ok(plan.warnings),
        Err(ValidateError::Invalid(invalid)) => Err(refused(dr, &invalid.errors)),
        Err(ValidateError::Kube(e)) => Ok(vec![unchecked(ctx, &e)?]),
    }
}

/// The warning for a read the check could not make. Only an answer of the API server
/// (forbidden, throttled, a server error) is one: without a connection or valid
/// credentials the create would fail as well, so that is the error itself.
fn unchecked(ctx: &Ctx, e: &kube::Error) -> Result<String> {
    let why = match e {
        kube::Error::Api(status) if status.code != 401 => status.message.clone(),
        kube::Error::Api(_)
        | kube::Error::HyperError(_)
        | kube::Error::Service(_)
        | kube::Error::Auth(_) => {
            return Err(ctx.error(e, Target::all(Kind::Object, &ctx.namespace)));
        }
        other => root_cause(other),
    };
    Ok(format!(
        "could not check the request before creating it ({why}); the controller checks it with its own rights and reports any mistake in the restore's status"
    ))
}

/// The error for a request validation refuses, each message in the flags' words.
pub(super) fn refused(dr: &DataRestore, errors: &[String]) -> CliError {
    let name = dr.metadata.name.as_deref().unwrap_or_default();
    let errors: Vec<String> = errors.iter().map(|e| flag_words(&dr.spec, e)).collect();
    CliError::new(bulleted(
        &format!("restore \"{name}\" would be refused"),
        &errors,
    ))
}

/// A validation message about `spec.*` fields, with each field named by the flag that
/// sets it (`spec.pvcs[0]` becomes `--pvc shop/data`).
pub(super) fn flag_words(spec: &DataRestoreSpec, message: &str) -> String {
    let mut pairs: Vec<(String, String)> = vec![(
        "spec.pvcs, spec.includedNamespaces and spec.selector are all empty".into(),
        "--pvc, --include-namespaces and --selector are all missing".into(),
    )];
    for (i, key) in spec.pvcs.iter().enumerate() {
        pairs.push((format!("spec.pvcs[{i}]"), format!("--pvc {key}")));
    }
    for (i, ns) in spec.included_namespaces.iter().enumerate() {
        pairs.push((
            format!("spec.includedNamespaces[{i}]"),
            format!("--include-namespaces {ns}"),
        ));
    }
    if let Some(paths) = &spec.paths {
        for (i, glob) in paths.include.iter().enumerate() {
            pairs.push((format!("spec.paths.include[{i}]"), format!("--path {glob}")));
        }
        for (i, glob) in paths.exclude.iter().enumerate() {
            pairs.push((
                format!("spec.paths.exclude[{i}]"),
                format!("--exclude {glob}"),
            ));
        }
    }
    for (field, flag) in [
        ("spec.method: is Staged", "--method: is staged"),
        ("spec.extraFiles: is Keep", "--extra-files: is keep"),
        ("remove spec.method", "leave out --method"),
        ("remove spec.extraFiles", "leave out --extra-files"),
        ("spec.method", "--method"),
        ("spec.extraFiles", "--extra-files"),
        ("set spec.paths.mirror to true", "add --mirror"),
        ("spec.paths.mirror", "--mirror"),
        ("spec.paths.include", "--path"),
        ("remove spec.paths", "leave out --path"),
        ("spec.paths", "--path"),
        ("spec.target is NewClaim", "--target is new-claim"),
        ("spec.target is InPlace", "--target is in-place"),
        ("set spec.target to NewClaim", "add --target new-claim"),
        (
            "remove spec.switchWorkloads",
            "leave out --switch-workloads",
        ),
        ("spec.switchWorkloads", "--switch-workloads"),
        ("leave spec.target out", "leave --target out"),
        ("spec.backupName", "--from-backup"),
        ("spec.scheduleName", "--from-schedule"),
        ("spec.includedNamespaces", "--include-namespaces"),
        ("spec.pvcs", "--pvc"),
        ("spec.candidateNodes", "--candidate-nodes"),
        (
            "set spec.acknowledgeRunningConsumers to true",
            "add --acknowledge-running-consumers",
        ),
        (
            "spec.acknowledgeRunningConsumers",
            "--acknowledge-running-consumers",
        ),
        ("spec.consumers is None", "--consumers is none"),
        ("spec.consumers is ScaleDown", "--consumers is scale-down"),
        ("spec.consumers is Detach", "--consumers is detach"),
        ("spec.consumers is Refuse", "--consumers is refuse"),
        ("spec.consumers to None", "--consumers to none"),
        ("spec.consumers", "--consumers"),
        ("spec.volumeTimeout", "--volume-timeout"),
        ("spec.timeout", "--timeout"),
        ("spec.parallel", "--parallel"),
        ("spec.restoreHelper.image", "--restore-helper-image"),
        ("spec.standInImage", "--stand-in-image"),
        ("consumers: Refuse", "--consumers refuse"),
        ("consumers: ScaleDown", "--consumers scale-down"),
        ("consumers: Detach", "--consumers detach"),
        ("backupName", "--from-backup"),
        ("scheduleName", "--from-schedule"),
    ] {
        pairs.push((field.into(), flag.into()));
    }
    // A selector's inner fields mean nothing to someone who typed --selector.
    let mut text = match message.split_once(": ") {
        Some((field, rest)) if field.starts_with("spec.selector") => {
            format!("--selector: {rest}")
        }
        _ => message.to_string(),
    };
    // `spec.candidateNodes["ns/pvc"]` is `--candidate-nodes ns/pvc=...`.
    let entry = "spec.candidateNodes[\"";
    while let Some(start) = text.find(entry) {
        let key_start = start + entry.len();
        let Some(len) = text[key_start..].find("\"]") else {
            break;
        };
        let key = text[key_start..key_start + len].to_string();
        text.replace_range(
            start..key_start + len + 2,
            &format!("--candidate-nodes {key}=..."),
        );
    }
    for (field, flag) in &pairs {
        text = text.replace(field.as_str(), flag);
    }
    text.replace("spec.selector", "--selector")
}

/// The error for flags that make no valid `what`, each mistake naming its flag.
pub(super) fn not_valid(what: &str, errors: &[String]) -> CliError {
    CliError::new(bulleted(
        &format!("the {what} request is not valid"),
        errors,
    ))
}

/// `title: only` for one item, a bulleted list for several.
pub(super) fn bulleted(title: &str, items: &[String]) -> String {
    match items {
        [one] => format!("{title}: {one}"),
        _ => {
            let mut text = format!("{title}:");
            for item in items {
                text += &format!("\n  - {item}");
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_as_the_flags_that_set_them() {
        let spec = DataRestoreSpec {
            pvcs: vec!["shop/a".into(), "shop/b".into()],
            candidate_nodes: [("shop/a".to_string(), vec!["n".to_string()])].into(),
            ..Default::default()
        };
        assert_eq!(
            flag_words(&spec, "spec.pvcs[1]: PVC shop/b is not in backup"),
            "--pvc shop/b: PVC shop/b is not in backup"
        );
        let mut with_paths = spec.clone();
        with_paths.paths = Some(crate::api::PathRestore {
            include: vec!["db".into(), "/etc".into()],
            ..Default::default()
        });
        let errors = crate::plan::spec_errors(&with_paths);
        let bad = errors.iter().find(|e| e.starts_with("spec.paths")).unwrap();
        let words = flag_words(&with_paths, bad);
        assert!(
            words.starts_with("--path /etc: ") && !words.contains("spec."),
            "{words}"
        );
        assert_eq!(
            flag_words(
                &spec,
                "spec.candidateNodes[\"shop/a\"]: these nodes do not exist: n"
            ),
            "--candidate-nodes shop/a=...: these nodes do not exist: n"
        );
        assert_eq!(
            flag_words(&spec, "spec.timeout: \"0s\" is zero"),
            "--timeout: \"0s\" is zero"
        );
        assert_eq!(
            flag_words(&spec, "spec.volumeTimeout: \"0s\" is zero"),
            "--volume-timeout: \"0s\" is zero"
        );
        assert_eq!(
            flag_words(
                &spec,
                "spec.consumers: PVC shop/a is mounted by pod shop/p: consumers: Refuse forbids it"
            ),
            "--consumers: PVC shop/a is mounted by pod shop/p: --consumers refuse forbids it"
        );
        let online = DataRestoreSpec {
            backup_name: Some("b".into()),
            pvcs: vec!["shop/a".into()],
            consumers: crate::api::ConsumerPolicy::None,
            ..Default::default()
        };
        let words = flag_words(&spec, &crate::plan::spec_errors(&online)[0]);
        assert!(
            words.starts_with("--acknowledge-running-consumers: --consumers is none, which")
                && words.contains("; add --acknowledge-running-consumers if that is meant")
                && !words.contains("spec."),
            "{words}"
        );
        assert_eq!(
            flag_words(
                &spec,
                "spec.selector.matchExpressions[0].operator: \"Like\" is not an operator"
            ),
            "--selector: \"Like\" is not an operator"
        );
        assert_eq!(
            flag_words(
                &DataRestoreSpec::default(),
                "spec.pvcs, spec.includedNamespaces and spec.selector are all empty, so no PVC is selected"
            ),
            "--pvc, --include-namespaces and --selector are all missing, so no PVC is selected"
        );
    }

    #[test]
    fn method_and_extra_files_refusals_read_as_their_flags() {
        let words = |change: fn(&mut DataRestoreSpec)| {
            let mut spec = DataRestoreSpec {
                backup_name: Some("b".into()),
                pvcs: vec!["shop/a".into()],
                ..Default::default()
            };
            change(&mut spec);
            let errors = crate::plan::spec_errors(&spec);
            assert_eq!(errors.len(), 1, "{errors:#?}");
            let words = flag_words(&spec, &errors[0]);
            assert!(!words.contains("spec."), "{words}");
            words
        };
        assert_eq!(
            words(|s| {
                s.method = crate::api::RestoreMethod::Staged;
                s.target = crate::api::RestoreTarget::NewClaim;
            }),
            "--method: is staged, but --target is new-claim, which fills a new claim directly and stops nothing, so there is no downtime to shorten; leave out --method, or leave --target out to restore in place"
        );
        assert_eq!(
            words(|s| {
                s.extra_files = crate::api::ExtraFiles::Keep;
                s.target = crate::api::RestoreTarget::NewClaim;
            }),
            "--extra-files: is keep, but --target is new-claim, and a new claim holds only the backup, so there is nothing to keep; leave out --extra-files, or leave --target out to restore in place"
        );
        // The CLI refuses --extra-files with --path itself; a spec made otherwise
        // still reads as the flags.
        assert_eq!(
            words(|s| {
                s.extra_files = crate::api::ExtraFiles::Keep;
                s.paths = Some(crate::api::PathRestore {
                    include: vec!["db".into()],
                    ..Default::default()
                });
            }),
            "--extra-files: is keep, but --path puts back only some paths of every PVC, which leaves the rest of each volume as it is and deletes under the paths only with --mirror; leave out --extra-files (and add --mirror to delete what the backup lacks under the paths), or leave out --path to restore whole volumes"
        );
    }

    #[test]
    fn one_error_is_a_line_several_a_list() {
        assert_eq!(bulleted("bad", &["x".into()]), "bad: x");
        assert_eq!(
            bulleted("bad", &["x".into(), "y".into()]),
            "bad:\n  - x\n  - y"
        );
    }
}
