//! `refill restore create` and `refill restore wait`.

use kube::api::PostParams;

use crate::api::{Backup, DataRestore, Schedule};

use super::args::{CreateArgs, OutputFormat, WaitArgs};
use super::client::Ctx;
use super::errors::{CliError, Kind, Result, Target, is_not_found, not_found};
use super::{dry_run, output, progress, spec, wait};

pub async fn create(ctx: &Ctx, args: &CreateArgs) -> Result<()> {
    let dr = spec::build(args, &ctx.namespace)
        .map_err(|errors| CliError::new(bulleted("the restore request is not valid", &errors)))?;
    check_source(ctx, &dr).await?;
    if args.dry_run {
        return dry_run::run(ctx, &dr, args.output).await;
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
pub async fn wait(ctx: &Ctx, args: &WaitArgs) -> Result<()> {
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
async fn check_source(ctx: &Ctx, dr: &DataRestore) -> Result<()> {
    let ns = ctx.namespace.as_str();
    if let Some(backup) = &dr.spec.backup_name {
        let target = Target::one(Kind::Backup, backup, ns);
        match ctx.api::<Backup>().get(backup).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Err(not_found(target)),
            Err(e) => return Err(ctx.error(&e, target)),
        }
    }
    if let Some(schedule) = &dr.spec.schedule_name {
        let target = Target::one(Kind::Schedule, schedule, ns);
        match ctx.api::<Schedule>().get(schedule).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Err(not_found(target)),
            Err(e) => return Err(ctx.error(&e, target)),
        }
    }
    Ok(())
}

/// `title: only` for one item, a bulleted list for several.
pub fn bulleted(title: &str, items: &[String]) -> String {
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
    fn one_error_is_a_line_several_a_list() {
        assert_eq!(bulleted("bad", &["x".into()]), "bad: x");
        assert_eq!(
            bulleted("bad", &["x".into(), "y".into()]),
            "bad:\n  - x\n  - y"
        );
    }
}
