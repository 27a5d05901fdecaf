//! What a team's request may ask for, and the DataRestore that carries it out: pure,
//! so that every refusal is tested on its own.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::api::{
    DataRestore, DataRestoreRequestSpec, DataRestoreRequestStatus, DataRestoreSpec,
    DataRestoreStatus, Phase,
};
use crate::controller::status;

/// The DataRestore of a request: readable, unique per request object (a request
/// deleted and made again under its name gets a new one), and a valid name.
pub(crate) fn data_restore_name(namespace: &str, name: &str, uid: &str) -> String {
    let readable: String = format!("req-{namespace}-{name}")
        .chars()
        .take(48)
        .collect::<String>()
        .trim_end_matches(['-', '.'])
        .to_string();
    let digest = Sha256::digest(uid.as_bytes());
    format!("{readable}-{}", &hex::encode(digest)[..8])
}

/// `claim` (a name, or `namespace/name` of the request's own namespace) as the
/// DataRestore's `namespace/name`; else why not, for the field `field`.
fn own_claim(namespace: &str, claim: &str, field: &str) -> Result<String, String> {
    let (in_namespace, name) = match claim.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => (namespace, claim),
    };
    if in_namespace != namespace {
        return Err(format!(
            "{field}: {claim:?} is in namespace {in_namespace}; a DataRestoreRequest restores claims of its own namespace ({namespace}) only"
        ));
    }
    if let Err(why) = crate::k8s_names::dns_subdomain(name) {
        return Err(format!("{field}: {claim:?} is not a claim name: {why}"));
    }
    Ok(format!("{namespace}/{name}"))
}

/// The DataRestore spec for a request in `namespace`, or every reason it is refused.
/// `backed_up` holds the namespaces whose volumes the named backup holds (empty when
/// there is no such backup: the answer is the same, so that a team learns nothing of
/// backups that are not its own).
pub(crate) fn data_restore_spec(
    namespace: &str,
    spec: &DataRestoreRequestSpec,
    backed_up: &BTreeSet<String>,
) -> Result<DataRestoreSpec, Vec<String>> {
    let mut errors = Vec::new();
    if spec.backup_name.is_empty() {
        errors.push("spec.backupName: required".to_string());
    } else if let Err(why) = crate::k8s_names::dns_subdomain(&spec.backup_name) {
        errors.push(format!(
            "spec.backupName: {:?} is not a backup name: {why}",
            spec.backup_name
        ));
    } else if !backed_up.contains(namespace) {
        errors.push(format!(
            "spec.backupName: no backup {:?} holds volumes of namespace {namespace}",
            spec.backup_name
        ));
    }
    let mut pvcs = Vec::new();
    for (i, claim) in spec.pvcs.iter().enumerate() {
        match own_claim(namespace, claim, &format!("spec.pvcs[{i}]")) {
            Ok(key) => pvcs.push(key),
            Err(e) => errors.push(e),
        }
    }
    let mut candidate_nodes = BTreeMap::new();
    for (claim, nodes) in &spec.candidate_nodes {
        match own_claim(namespace, claim, &format!("spec.candidateNodes[{claim:?}]")) {
            Ok(key) => {
                candidate_nodes.insert(key, nodes.clone());
            }
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(DataRestoreSpec {
        backup_name: Some(spec.backup_name.clone()),
        // No claims named: every claim of the namespace the backup holds.
        included_namespaces: if pvcs.is_empty() {
            vec![namespace.to_string()]
        } else {
            Vec::new()
        },
        pvcs,
        candidate_nodes,
        method: spec.method,
        extra_files: spec.extra_files,
        consumers: spec.consumers,
        acknowledge_running_consumers: spec.acknowledge_running_consumers,
        on_failure: spec.on_failure,
        git_ops: spec.git_ops.clone(),
        volume_timeout: spec.volume_timeout.clone(),
        timeout: spec.timeout.clone(),
        cancel: spec.cancel,
        // The helper's image, command and security, and the stand-in's image, stay
        // as Velero's namespace sets them: a team has no say over what runs there.
        ..Default::default()
    })
}

/// The status of a refused request, its conditions as a failed DataRestore's.
pub(crate) fn refused(
    errors: Vec<String>,
    generation: Option<i64>,
    previous: &DataRestoreRequestStatus,
) -> DataRestoreRequestStatus {
    DataRestoreRequestStatus {
        data_restore: None,
        restore: failed(
            DataRestoreStatus {
                errors,
                conditions: previous.restore.conditions.clone(),
                ..Default::default()
            },
            generation,
        ),
    }
}

/// The reason of the Reconciling condition of a request waiting for its turn.
pub(crate) const WAITING_FOR_TURN: &str = "WaitingForTurn";

/// The status of a request that waits for its turn ([`super::turn`]): not begun, its
/// Reconciling condition saying why.
pub(crate) fn waiting(
    why: String,
    generation: Option<i64>,
    previous: &DataRestoreRequestStatus,
) -> DataRestoreRequestStatus {
    let status = DataRestoreStatus {
        phase: Phase::New,
        observed_generation: generation,
        summary: Some("waiting".into()),
        conditions: previous.restore.conditions.clone(),
        ..Default::default()
    };
    let mut conditions = status::conditions(&status, generation, false);
    for condition in &mut conditions {
        if condition.type_ == status::condition::RECONCILING {
            condition.reason = WAITING_FOR_TURN.into();
            condition.message = why.clone();
        }
    }
    DataRestoreRequestStatus {
        data_restore: None,
        restore: DataRestoreStatus {
            conditions,
            ..status
        },
    }
}

/// The status of a request whose DataRestore was deleted before it ended: what was
/// seen of the restore stays, and the phase and conditions say it failed.
pub(crate) fn lost(
    previous: &DataRestoreRequestStatus,
    generation: Option<i64>,
) -> DataRestoreRequestStatus {
    let which = previous
        .data_restore
        .as_deref()
        .unwrap_or("its DataRestore");
    let mut restore = previous.restore.clone();
    restore.errors.push(format!(
        "DataRestore {which}, which carried the request out, was deleted before it ended; its consumers were brought back by that deletion; create a new request to restore again"
    ));
    DataRestoreRequestStatus {
        data_restore: previous.data_restore.clone(),
        restore: failed(restore, generation),
    }
}

/// `status` ended Failed, with conditions that say so, of this request's generation.
fn failed(status: DataRestoreStatus, generation: Option<i64>) -> DataRestoreStatus {
    let status = DataRestoreStatus {
        phase: Phase::Failed,
        observed_generation: generation,
        ..status
    };
    DataRestoreStatus {
        conditions: status::conditions(&status, generation, false),
        ..status
    }
}

/// The request's status: the DataRestore's, as far as the team may see it.
pub(crate) fn mirrored(dr: &DataRestore, generation: Option<i64>) -> DataRestoreRequestStatus {
    let status = dr.status.clone().unwrap_or_default();
    DataRestoreRequestStatus {
        data_restore: Some(format!(
            "{}/{}",
            dr.metadata.namespace.as_deref().unwrap_or_default(),
            dr.metadata.name.as_deref().unwrap_or_default()
        )),
        // Of this request's generation, not the DataRestore's.
        restore: DataRestoreStatus {
            observed_generation: generation,
            conditions: status
                .conditions
                .into_iter()
                .map(|c| Condition {
                    observed_generation: generation,
                    ..c
                })
                .collect(),
            ..status
        },
    }
}

#[cfg(test)]
mod tests;
