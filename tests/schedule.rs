//! DataRestoreSchedules against the real local cluster: the controller as refill's
//! ServiceAccount, a simulated node agent, and Velero Backups as a Velero Schedule
//! labels them. A standby refreshed from each new backup of the primary's schedule.

use std::time::Duration;

use anyhow::{Result, ensure};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use refill::api::{
    DataRestore, DataRestoreSchedule, DataRestoreScheduleSpec, DataRestoreScheduleStatus, Phase,
};
use refill_e2e::fixture::{self, Scene, phase};
use refill_e2e::{TestEnv, run_test, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

async fn scene(env: TestEnv) -> Result<Scene> {
    Scene::new(env, TIMEOUT).await
}

/// A Completed backup `name` of the Velero Schedule `nightly`, of the claim `data`
/// holding `f` = `content`, ended at `at`.
async fn nightly(s: &Scene, name: &str, content: &str, at: &str) -> Result<()> {
    let mut volume = s.backed_up("data", "web-0", &[("f", content.as_bytes())]);
    volume.snapshot_id = format!("{}-{name}", s.ns);
    s.backup(name, &[volume]).await?;
    s.made_by_schedule(name, "nightly", at).await
}

/// A schedule restoring the claim `data` from each new backup of `nightly`.
async fn standby(s: &Scene, paused: bool) -> Result<()> {
    let mut template = s.spec("unused", &["data"]);
    template.backup_name = None;
    let schedule = DataRestoreSchedule::new(
        "standby",
        DataRestoreScheduleSpec {
            template,
            velero_schedule: Some("nightly".into()),
            paused,
            ..Default::default()
        },
    );
    Api::<DataRestoreSchedule>::namespaced(s.client.clone(), &s.ns)
        .create(&PostParams::default(), &schedule)
        .await?;
    Ok(())
}

/// Waits until the schedule's status satisfies `done`.
async fn schedule_until(
    s: &Scene,
    what: &str,
    done: impl Fn(&DataRestoreScheduleStatus) -> bool,
) -> Result<DataRestoreScheduleStatus> {
    let api: Api<DataRestoreSchedule> = Api::namespaced(s.client.clone(), &s.ns);
    wait_for(format!("schedule standby: {what}"), s.timeout, || async {
        let status = api.get("standby").await?.status.unwrap_or_default();
        Ok(done(&status).then_some(status))
    })
    .await
}

async fn restores(s: &Scene) -> Result<Vec<DataRestore>> {
    let mut all = Api::<DataRestore>::namespaced(s.client.clone(), &s.ns)
        .list(&ListParams::default())
        .await?
        .items;
    all.sort_by_key(|r| r.metadata.creation_timestamp.clone());
    Ok(all)
}

fn condition<'a>(status: &'a DataRestoreScheduleStatus, type_: &str) -> (&'a str, &'a str) {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map_or(("", ""), |c| (c.status.as_str(), c.reason.as_str()))
}

#[tokio::test]
async fn each_new_backup_is_restored_one_at_a_time_the_newest_winning() -> Result<()> {
    run_test("drs-follow", |env| async move {
        let s = scene(env).await?;
        let dir = s.volume("data", "node-a", &[("f", b"stale")]).await?;
        s.deployment("web", 1, &["data"]).await?;
        nightly(&s, "nightly-1", "monday", "2026-11-01T02:00:00Z").await?;
        let _controller = s.controller().await?;

        // No node agent yet: the first restore holds on, as a long one would.
        standby(&s, false).await?;
        let first = schedule_until(&s, "a restore running", |st| st.active.is_some()).await?;
        ensure!(
            first.last_backup.as_deref() == Some("nightly-1"),
            "{first:#?}"
        );
        ensure!(condition(&first, "Reconciling") == ("True", "Restoring"));

        // Two backups while it runs: neither starts a second restore.
        nightly(&s, "nightly-2", "tuesday", "2026-11-02T02:00:00Z").await?;
        nightly(&s, "nightly-3", "wednesday", "2026-11-03T02:00:00Z").await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        ensure!(restores(&s).await?.len() == 1, "never two restores at once");

        let _agent = s.node_agent();
        let done = schedule_until(&s, "nightly-3 restored", |st| {
            st.last_backup.as_deref() == Some("nightly-3")
                && st.active.is_none()
                && st.last_result == Some(Phase::Completed)
        })
        .await?;
        ensure!(
            condition(&done, "Ready") == ("True", "Completed"),
            "{done:#?}"
        );
        ensure!(fixture::read(&dir, "f")? == b"wednesday");

        let made = restores(&s).await?;
        let backups: Vec<Option<String>> =
            made.iter().map(|r| r.spec.backup_name.clone()).collect();
        ensure!(
            backups == [Some("nightly-1".into()), Some("nightly-3".into())],
            "nightly-2 was passed over for the newer nightly-3: {backups:?}"
        );
        let first_end = made[0]
            .status
            .as_ref()
            .and_then(|st| st.completion_time.clone());
        ensure!(
            first_end.is_some_and(|end| made[1].metadata.creation_timestamp.as_ref() >= Some(&end)),
            "the second restore began before the first ended"
        );
        ensure!(made.iter().all(|r| phase(r) == Phase::Completed));
        ensure!(
            made.iter()
                .all(|r| r.owner_references().iter().any(|o| o.name == "standby"))
        );
        s.ready_pods("web", 1).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_paused_schedule_starts_nothing_and_a_wrong_one_says_which_field() -> Result<()> {
    run_test("drs-paused", |env| async move {
        let s = scene(env).await?;
        let dir = s.volume("data", "node-a", &[("f", b"stale")]).await?;
        nightly(&s, "nightly-1", "monday", "2026-11-01T02:00:00Z").await?;
        let _controller = s.controller().await?;
        let _agent = s.node_agent();

        standby(&s, true).await?;
        let paused = schedule_until(&s, "status written", |st| !st.conditions.is_empty()).await?;
        ensure!(
            condition(&paused, "Ready") == ("False", "Paused"),
            "{paused:#?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        ensure!(
            restores(&s).await?.is_empty(),
            "a paused schedule started a restore"
        );

        let schedules: Api<DataRestoreSchedule> = Api::namespaced(s.client.clone(), &s.ns);
        schedules
            .patch(
                "standby",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"paused": false}})),
            )
            .await?;
        schedule_until(&s, "nightly-1 restored", |st| {
            st.last_result == Some(Phase::Completed) && st.active.is_none()
        })
        .await?;
        ensure!(fixture::read(&dir, "f")? == b"monday");

        // A cron that is no cron: Stalled, naming spec.cron, and no restore started.
        schedules
            .patch(
                "standby",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cron": "61 * * * *"}})),
            )
            .await?;
        let stalled = schedule_until(&s, "stalled", |st| !st.errors.is_empty()).await?;
        ensure!(
            stalled.errors[0].starts_with("spec.cron: \"61 * * * *\""),
            "{:?}",
            stalled.errors
        );
        ensure!(condition(&stalled, "Stalled").0 == "True");
        ensure!(restores(&s).await?.len() == 1);
        ensure!(restores(&s).await?[0].name_any().starts_with("standby-"));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_cron_schedule_restores_its_templates_backup_at_the_next_minute() -> Result<()> {
    run_test("drs-cron", |env| async move {
        let s = scene(env).await?;
        let dir = s.volume("data", "node-a", &[("f", b"stale")]).await?;
        s.backup(
            "golden",
            &[s.backed_up("data", "web-0", &[("f", b"golden")])],
        )
        .await?;
        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let schedule = DataRestoreSchedule::new(
            "standby",
            DataRestoreScheduleSpec {
                template: s.spec("golden", &["data"]),
                cron: Some("* * * * *".into()),
                ..Default::default()
            },
        );
        let schedules: Api<DataRestoreSchedule> = Api::namespaced(s.client.clone(), &s.ns);
        schedules.create(&PostParams::default(), &schedule).await?;
        let waiting =
            schedule_until(&s, "the next run known", |st| st.next_run_time.is_some()).await?;
        ensure!(
            restores(&s).await?.is_empty(),
            "no cron time has come yet: {waiting:#?}"
        );

        // The next whole minute starts one restore of the template's backup.
        let api: Api<DataRestoreSchedule> = Api::namespaced(s.client.clone(), &s.ns);
        let done = wait_for("a cron run completed", Duration::from_secs(120), || async {
            let status = api.get("standby").await?.status.unwrap_or_default();
            Ok((status.last_result == Some(Phase::Completed)).then_some(status))
        })
        .await?;
        schedules
            .patch(
                "standby",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"paused": true}})),
            )
            .await?;
        ensure!(fixture::read(&dir, "f")? == b"golden");
        let made = restores(&s).await?;
        ensure!(made[0].spec.backup_name.as_deref() == Some("golden"));
        let ran_at = done.last_cron_time.as_ref().expect("the cron time taken").0;
        ensure!(ran_at.as_second() % 60 == 0, "a whole minute: {ran_at}");
        ensure!(
            done.next_run_time
                .as_ref()
                .is_some_and(|next| next.0 > ran_at),
            "{done:#?}"
        );
        Ok(())
    })
    .await
}
