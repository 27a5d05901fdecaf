//! One volume's restore: what its world looks like ([`sight`]), what happens next
//! ([`decide`], pure, with a table of every transition), the effect ([`execute`]), the
//! change to its record ([`apply`]), and which changes only say what was seen and may
//! be written late ([`observed`]).

pub(super) mod apply;
pub(crate) mod decide;
pub(super) mod execute;
pub(crate) mod observed;
pub(super) mod paths;
pub(crate) mod sight;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::VolumeStatus;

use super::Result;
use apply::Applied;
use decide::Rules;
use execute::Act;

/// How a volume's message begins while its PodVolumeRestore waits for a node agent
/// to take it (the metrics count these).
pub(super) const WAITING_FOR_NODE_AGENT: &str = "waiting for a node agent to take PodVolumeRestore";
/// How its warning begins once it has waited past the grace.
pub(super) const NO_NODE_AGENT: &str = "no node agent has taken PodVolumeRestore";

/// A volume after one pass.
pub(super) struct Advanced {
    pub volume: VolumeStatus,
    pub applied: Applied,
    /// A copier pod or scratch claim of the volume is still there: the restore may not
    /// end yet.
    pub left_behind: bool,
    /// The volume's newest record is not written yet and its next step would act, or
    /// end the volume: the step waits for the record to be written.
    pub held: bool,
}

/// Moves one volume on by one step. On an error, nothing of this pass is kept for the
/// volume: every effect is idempotent under its derived name, and is done again.
///
/// `lagging`: its VolumePluginRestore holds an older record than `volume`, which
/// differs from it only by what was seen ([`observed`]). Then a step that acts, or
/// that ends the volume (which frees its consumers in the same pass), is held until
/// the newest record is written, so that no effect ever follows a record the cluster
/// does not hold.
pub(super) async fn advance(
    act: &Act<'_>,
    rules: &Rules,
    volume: VolumeStatus,
    lagging: bool,
) -> Result<Advanced> {
    let mut volume = volume;
    let found = sight::found(act.ctx, &act.dr.name_any(), act.uid, &volume, act.pass).await?;
    sight::follow(&mut volume, &found, act.uid);
    // An ended volume with nothing of refill's left has nothing more to do. Looked at
    // again, each ended volume of a large restore would cost a look at its claim's pods
    // and consumers on every pass.
    if volume.phase.is_terminal() && found.nothing_left() {
        return Ok(Advanced {
            volume,
            applied: Applied::default(),
            left_behind: false,
            held: false,
        });
    }
    let seen = sight::seen(act.ctx, act.uid, act.consumers_of, &volume, &found).await?;
    let now = Timestamp::now();
    let step = decide::decide(&volume, &seen, rules, now);
    let left_behind = seen.copier != decide::CopierSeen::Absent || seen.scratch;
    if lagging && !observed::may_take(&volume, &step, now) {
        return Ok(Advanced {
            volume,
            applied: Applied::default(),
            left_behind,
            held: true,
        });
    }
    let change = match step.effect {
        Some(effect) => execute::perform(act, &found, &mut volume, effect)
            .await?
            .unwrap_or(step.change),
        None => step.change,
    };
    let applied = apply::apply(&mut volume, change, now);
    Ok(Advanced {
        volume,
        applied,
        left_behind,
        held: false,
    })
}
