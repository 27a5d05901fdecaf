//! Checks of a DataRestore's spec that need nothing from the cluster. The controller
//! runs them before it reads anything, and `refill restore create` before it writes.
//!
//! Every message starts with the field it is about (`spec.pvcs[0]: ...`), says what is
//! wrong and how to put it right.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::{
    DataRestoreSpec, ExtraFiles, PathRestore, RestoreHelperOverrides, RestoreMethod, RestoreTarget,
};
use crate::k8s_names::{dns_label, dns_subdomain, label_key, label_value};

/// Every mistake in the spec that can be told without the cluster, in field order.
pub(crate) fn spec_errors(spec: &DataRestoreSpec) -> Vec<String> {
    let mut errors = Vec::new();
    source_errors(spec, &mut errors);
    if spec.pvcs.is_empty() && spec.included_namespaces.is_empty() && spec.selector.is_none() {
        errors.push(
            "spec.pvcs, spec.includedNamespaces and spec.selector are all empty, so no PVC is selected: name PVCs in spec.pvcs (as namespace/name), or namespaces in spec.includedNamespaces, or set spec.selector".into(),
        );
    }
    for (i, ns) in spec.included_namespaces.iter().enumerate() {
        if let Err(why) = dns_label(ns) {
            errors.push(format!(
                "spec.includedNamespaces[{i}]: \"{ns}\" is not a namespace name: {why}"
            ));
        }
    }
    pvc_errors(&spec.pvcs, &mut errors);
    if let Some(selector) = &spec.selector {
        selector_errors(selector, &mut errors);
    }
    candidate_errors(&spec.candidate_nodes, &mut errors);
    consumer_policy_errors(spec, &mut errors);
    if let Some(paths) = &spec.paths {
        path_errors("spec.paths", paths, &mut errors);
    }
    for (key, paths) in &spec.pvc_paths {
        let field = format!("spec.pvcPaths[\"{key}\"]");
        if !is_pvc_key(key) {
            errors.push(format!(
                "{field}: the key \"{key}\" is not a PVC reference: write it as namespace/name of a PVC to restore"
            ));
        }
        path_errors(&field, paths, &mut errors);
    }
    let some_paths = spec.paths.is_some() || !spec.pvc_paths.is_empty();
    if some_paths && spec.target == RestoreTarget::NewClaim {
        let field = if spec.paths.is_some() {
            "spec.paths"
        } else {
            "spec.pvcPaths"
        };
        errors.push(format!(
            "{field}: spec.target is NewClaim, which gets the whole backup into a new claim; remove the paths, or leave spec.target out to put the paths back in place"
        ));
    }
    whole_volume_errors(spec, &mut errors);
    if spec.switch_workloads && spec.target != RestoreTarget::NewClaim {
        errors.push(
            "spec.switchWorkloads: workloads are switched only onto the new claims of a restore into new claims, and spec.target is InPlace; set spec.target to NewClaim, or remove spec.switchWorkloads".into(),
        );
    }
    for (field, value) in [
        ("spec.volumeTimeout", &spec.volume_timeout),
        ("spec.timeout", &spec.timeout),
    ] {
        if let Some(value) = value
            && let Err(why) = duration(value)
        {
            errors.push(format!("{field}: {why}"));
        }
    }
    if spec.parallel == Some(0) {
        errors.push(
            "spec.parallel: 0 would restore nothing; set it to 1 or more, or leave it out for the default of 8".into(),
        );
    }
    if let Some(helper) = &spec.restore_helper {
        helper_errors(helper, &mut errors);
    }
    if let Some(image) = &spec.stand_in_image
        && let Err(why) = image_reference(image)
    {
        errors.push(format!(
            "spec.standInImage: {why}; leave the field out for the default image"
        ));
    }
    errors
}

/// spec.method and spec.extraFiles say how a whole volume is put back in place. A new
/// claim is filled directly, stops nothing and holds only the backup; a path restore
/// always fills a scratch claim first and deletes only under its paths, with `mirror`.
/// A choice that cannot apply is refused rather than ignored, so that nobody expects
/// what will not happen.
fn whole_volume_errors(spec: &DataRestoreSpec, errors: &mut Vec<String>) {
    let new_claim = spec.target == RestoreTarget::NewClaim;
    if new_claim && spec.method == RestoreMethod::Staged {
        errors.push(
            "spec.method: is Staged, but spec.target is NewClaim, which fills a new claim directly and stops nothing, so there is no downtime to shorten; remove spec.method, or leave spec.target out to restore in place".into(),
        );
    }
    if spec.extra_files != ExtraFiles::Keep {
        return;
    }
    if new_claim {
        errors.push(
            "spec.extraFiles: is Keep, but spec.target is NewClaim, and a new claim holds only the backup, so there is nothing to keep; remove spec.extraFiles, or leave spec.target out to restore in place".into(),
        );
    } else if spec.paths.is_some() {
        errors.push(
            "spec.extraFiles: is Keep, but spec.paths puts back only some paths of every PVC, which leaves the rest of each volume as it is and deletes under the paths only with spec.paths.mirror; remove spec.extraFiles (and set spec.paths.mirror to true to delete what the backup lacks under the paths), or remove spec.paths to restore whole volumes".into(),
        );
    }
}

/// Parses a duration as the controller reads `timeout` and `volumeTimeout`.
pub(crate) fn duration(value: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(value) {
        Ok(d) if d.is_zero() => Err(format!(
            "\"{value}\" is zero; give a duration longer than zero, like 30m or 2h"
        )),
        Ok(d) => Ok(d),
        Err(_) if value.trim_start().starts_with('-') => Err(format!(
            "\"{value}\" is negative; give a duration longer than zero, like 30m or 2h"
        )),
        Err(e) => Err(format!(
            "\"{value}\" is not a duration ({e}); write it like 30m, 2h or 1h30m"
        )),
    }
}

fn source_errors(spec: &DataRestoreSpec, errors: &mut Vec<String>) {
    let named = spec.backup_name.as_deref();
    let schedule = spec.schedule_name.as_deref();
    match (named, schedule) {
        (Some(_), Some(_)) => errors.push(
            "spec.backupName and spec.scheduleName are both set: keep exactly one (backupName for one backup, scheduleName for a schedule's newest Completed backup)".into(),
        ),
        (None, None) => errors.push(
            "spec.backupName and spec.scheduleName are both missing: set backupName to a Velero Backup, or scheduleName to use a schedule's newest Completed backup".into(),
        ),
        (Some(name), None) => name_error("spec.backupName", "backup", name, errors),
        (None, Some(name)) => name_error("spec.scheduleName", "schedule", name, errors),
    }
}

fn name_error(field: &str, what: &str, name: &str, errors: &mut Vec<String>) {
    if let Err(why) = dns_subdomain(name) {
        errors.push(format!(
            "{field}: \"{name}\" is not a {what} name: {why}; list them with: kubectl get {what}s -n <velero namespace>"
        ));
    }
}

fn pvc_errors(pvcs: &[String], errors: &mut Vec<String>) {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, key) in pvcs.iter().enumerate() {
        let field = format!("spec.pvcs[{i}]");
        let Some((ns, name)) = key
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        else {
            errors.push(format!(
                "{field}: \"{key}\" is not a PVC reference: write it as namespace/name, e.g. shop/data-db-0"
            ));
            continue;
        };
        if let Err(why) = dns_label(ns) {
            errors.push(format!(
                "{field}: \"{ns}\" in \"{key}\" is not a namespace name: {why}"
            ));
        }
        if let Err(why) = dns_subdomain(name) {
            errors.push(format!(
                "{field}: \"{name}\" in \"{key}\" is not a PVC name: {why}"
            ));
        }
        // A repeated entry is most often a copy whose name was not changed: the PVC
        // meant instead would silently stay unrestored, so it is refused.
        if let Some(first) = seen.insert(key.as_str(), i) {
            seen.insert(key.as_str(), first);
            errors.push(format!(
                "{field}: \"{key}\" is already spec.pvcs[{first}]; name each PVC once (was another PVC meant?)"
            ));
        }
    }
}

/// A selector as Kubernetes checks its own (a Deployment's, say): a value no label can
/// hold would silently match nothing, or with NotIn everything.
fn selector_errors(selector: &LabelSelector, errors: &mut Vec<String>) {
    for (key, value) in selector.match_labels.iter().flatten() {
        if let Err(why) = label_key(key) {
            errors.push(format!(
                "spec.selector.matchLabels: \"{key}\" is not a label key: {why}"
            ));
        }
        if let Err(why) = label_value(value) {
            errors.push(format!(
                "spec.selector.matchLabels[\"{key}\"]: \"{value}\" is not a label value: {why}"
            ));
        }
    }
    for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
        let field = format!("spec.selector.matchExpressions[{i}]");
        if let Err(why) = label_key(&expr.key) {
            errors.push(format!(
                "{field}.key: \"{}\" is not a label key: {why}",
                expr.key
            ));
        }
        let values = expr.values.as_deref().unwrap_or_default();
        for (j, value) in values.iter().enumerate() {
            if let Err(why) = label_value(value) {
                errors.push(format!(
                    "{field}.values[{j}]: \"{value}\" is not a label value: {why}"
                ));
            }
        }
        match expr.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errors.push(format!(
                "{field}.values: operator {} needs at least one value",
                expr.operator
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(format!(
                "{field}.values: operator {} takes no values; remove them",
                expr.operator
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errors.push(format!(
                "{field}.operator: \"{other}\" is not an operator: use In, NotIn, Exists or DoesNotExist"
            )),
        }
    }
}

fn is_pvc_key(key: &str) -> bool {
    key.split_once('/')
        .is_some_and(|(ns, name)| dns_label(ns).is_ok() && dns_subdomain(name).is_ok())
}

/// The globs of a path restore, each named by its place in the field.
fn path_errors(field: &str, paths: &PathRestore, errors: &mut Vec<String>) {
    if paths.include.is_empty() {
        errors.push(format!(
            "{field}.include: names no path; list the paths to put back (relative to the volume's root, e.g. db/data.db or config/**), or remove {field} to restore whole volumes"
        ));
    }
    for (list, patterns) in [("include", &paths.include), ("exclude", &paths.exclude)] {
        for (i, pattern) in patterns.iter().enumerate() {
            if let Some(why) = crate::copy::pattern_error(pattern) {
                errors.push(format!("{field}.{list}[{i}]: {why}"));
            }
        }
    }
}

fn candidate_errors(candidates: &BTreeMap<String, Vec<String>>, errors: &mut Vec<String>) {
    for (key, nodes) in candidates {
        let field = format!("spec.candidateNodes[\"{key}\"]");
        if !is_pvc_key(key) {
            errors.push(format!(
                "{field}: the key \"{key}\" is not a PVC reference: write it as namespace/name of a PVC in spec.pvcs"
            ));
        }
        if nodes.is_empty() {
            errors.push(format!(
                "{field}: names no node; list the nodes the PVC's volume may be created on, or remove the entry"
            ));
        }
        for node in nodes {
            if let Err(why) = dns_subdomain(node) {
                errors.push(format!(
                    "{field}: \"{node}\" is not a node name: {why}; list nodes with: kubectl get nodes"
                ));
            }
        }
    }
}

/// Running consumers are left alone only when the spec says, in a field of its own, that
/// the writes under them are meant: `None` alone is too easily a slip.
fn consumer_policy_errors(spec: &DataRestoreSpec, errors: &mut Vec<String>) {
    let online = spec.writes_under_running_consumers();
    if online && !spec.acknowledge_running_consumers {
        errors.push(
            "spec.acknowledgeRunningConsumers: spec.consumers is None, which overwrites files under applications that keep running (they may read half-restored files, or write over them); set spec.acknowledgeRunningConsumers to true if that is meant, or leave spec.consumers out to stop them during the restore".into(),
        );
    }
    if !online && spec.acknowledge_running_consumers {
        errors.push(match spec.target {
            RestoreTarget::NewClaim => "spec.acknowledgeRunningConsumers: is true but spec.target is NewClaim, which writes only into new claims; remove it".to_string(),
            RestoreTarget::InPlace => format!(
                "spec.acknowledgeRunningConsumers: is true but spec.consumers is {:?}, which stops the consumers; remove it, or set spec.consumers to None to restore under running consumers",
                spec.consumers
            ),
        });
    }
}

fn helper_errors(helper: &RestoreHelperOverrides, errors: &mut Vec<String>) {
    if let Some(image) = &helper.image
        && let Err(why) = image_reference(image)
    {
        errors.push(format!(
            "spec.restoreHelper.image: {why}; leave the field out to use Velero's restore-helper image"
        ));
    }
    if let Some(command) = &helper.command
        && (command.is_empty() || command.iter().all(|c| c.trim().is_empty()))
    {
        errors.push(
            "spec.restoreHelper.command: is empty; give the command of Velero's restore helper, or leave the field out".into(),
        );
    }
    if let Some(resources) = &helper.resources {
        resource_errors(resources, errors);
    }
}

fn resource_errors(resources: &ResourceRequirements, errors: &mut Vec<String>) {
    for (part, list) in [
        ("limits", &resources.limits),
        ("requests", &resources.requests),
    ] {
        for (name, value) in list.iter().flatten() {
            if let Err(why) = quantity(&value.0) {
                errors.push(format!(
                    "spec.restoreHelper.resources.{part}.{name}: \"{}\" is not a quantity: {why}; write it like 100m or 128Mi",
                    value.0
                ));
            }
        }
    }
    for (name, limit) in resources.limits.iter().flatten() {
        let request = resources.requests.as_ref().and_then(|r| r.get(name));
        if let (Some(request), Ok(limit_v), Some(Ok(request_v))) =
            (request, quantity(&limit.0), request.map(|r| quantity(&r.0)))
            && request_v > limit_v
        {
            errors.push(format!(
                "spec.restoreHelper.resources.requests.{name}: {} is more than the limit {}; lower the request or raise the limit",
                request.0, limit.0
            ));
        }
    }
}

/// A Kubernetes quantity (`100m`, `1.5Gi`, `2e3`), as a number, or why it is not one.
pub(crate) fn quantity(text: &str) -> Result<f64, String> {
    if text.is_empty() {
        return Err("it is empty".into());
    }
    if text.chars().any(char::is_whitespace) {
        return Err("it holds a space".into());
    }
    let number_end = text
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || (*i == 0 && (*c == '+' || *c == '-'))))
        .map(|(i, _)| i)
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let digits = number.trim_start_matches(['+', '-']);
    if digits.is_empty() || digits == "." || digits.matches('.').count() > 1 {
        return Err("it does not start with a number".into());
    }
    let mut value: f64 = digits
        .parse()
        .map_err(|_| "it does not start with a number".to_string())?;
    if number.starts_with('-') {
        value = -value;
    }
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => {
            let power: i32 = exp[1..]
                .parse()
                .map_err(|_| format!("\"{suffix}\" is not a unit"))?;
            10f64.powi(power)
        }
        other => {
            return Err(format!(
                "\"{other}\" is not a unit (use m, k, M, G or Ki, Mi, Gi, ...)"
            ));
        }
    };
    if value < 0.0 {
        return Err("it is negative".into());
    }
    Ok(value * factor)
}

/// An image reference as a container runtime accepts it: `[host[:port]/]path[:tag][@digest]`.
pub(crate) fn image_reference(image: &str) -> Result<(), String> {
    if image.trim().is_empty() {
        return Err("the image is empty".into());
    }
    if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "\"{image}\" holds a space or control character; an image reference has none"
        ));
    }
    let bad = |why: &str| Err(format!("\"{image}\" is not an image reference: {why}"));
    let (rest, digest) = match image.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest {
        let ok = digest.split_once(':').is_some_and(|(algo, hex)| {
            !algo.is_empty()
                && algo
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-_".contains(c))
                && hex.len() >= 32
                && hex.chars().all(|c| c.is_ascii_hexdigit())
        });
        if !ok {
            return bad("the digest after @ must look like sha256:<64 hex digits>");
        }
    }
    // A tag follows the last ':' after the last '/'; a ':' before it is a registry port.
    let last_slash = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        let ok = !tag.is_empty()
            && tag.len() <= 128
            && !tag.starts_with(['.', '-'])
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        if !ok {
            return bad(
                "the tag after ':' may hold only letters, digits, '_', '.' and '-' (up to 128)",
            );
        }
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    let host = (parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost"))
        .then(|| parts.remove(0));
    if let Some(host) = host {
        let (hostname, port) = host.split_once(':').unwrap_or((host, ""));
        let host_ok = !hostname.is_empty()
            && hostname
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-".contains(c));
        let port_ok = if port.is_empty() {
            !host.ends_with(':')
        } else {
            port.chars().all(|c| c.is_ascii_digit())
        };
        if !host_ok || !port_ok {
            return bad("the registry host before the first '/' is not a host name");
        }
    }
    for part in parts {
        let ok = !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return bad(
                "each part of the repository path holds only lowercase letters, digits and '.', '_' or '-' between them",
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ConsumerPolicy;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn valid() -> DataRestoreSpec {
        DataRestoreSpec {
            backup_name: Some("nightly".into()),
            pvcs: vec!["shop/data-db-0".into()],
            ..Default::default()
        }
    }

    /// The errors of `valid()` changed by `change`; each must name `field`.
    fn errors_of(change: impl FnOnce(&mut DataRestoreSpec)) -> Vec<String> {
        let mut spec = valid();
        change(&mut spec);
        spec_errors(&spec)
    }

    fn one_error(field: &str, change: impl FnOnce(&mut DataRestoreSpec)) -> String {
        let errors = errors_of(change);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(
            errors[0].starts_with(&format!("{field}: ")) || errors[0].starts_with(field),
            "{} does not start with {field}",
            errors[0]
        );
        errors[0].clone()
    }

    #[test]
    fn a_valid_spec_has_no_errors() {
        assert_eq!(spec_errors(&valid()), Vec::<String>::new());
        let full = DataRestoreSpec {
            schedule_name: Some("nightly".into()),
            backup_name: None,
            included_namespaces: vec!["shop".into()],
            selector: Some(LabelSelector {
                match_labels: Some(
                    [("app.kubernetes.io/name".to_string(), "db".to_string())].into(),
                ),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["gold".into()]),
                }]),
            }),
            candidate_nodes: [("shop/data-db-0".to_string(), vec!["node-a".to_string()])].into(),
            timeout: Some("2h".into()),
            volume_timeout: Some("1h30m".into()),
            parallel: Some(2),
            restore_helper: Some(RestoreHelperOverrides {
                image: Some("registry.example.com:5000/velero/velero:v1.17.0".into()),
                resources: Some(ResourceRequirements {
                    limits: Some([("cpu".to_string(), Quantity("1".into()))].into()),
                    requests: Some([("cpu".to_string(), Quantity("100m".into()))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            stand_in_image: Some("registry.k8s.io/pause:3.10".into()),
            ..valid()
        };
        assert_eq!(spec_errors(&full), Vec::<String>::new());
    }

    #[test]
    fn running_consumers_need_an_acknowledgement() {
        let unacknowledged = one_error("spec.acknowledgeRunningConsumers", |s| {
            s.consumers = ConsumerPolicy::None
        });
        assert!(
            unacknowledged.contains("overwrites files under applications that keep running"),
            "{unacknowledged}"
        );
        let stray = one_error("spec.acknowledgeRunningConsumers", |s| {
            s.acknowledge_running_consumers = true
        });
        assert!(stray.contains("spec.consumers is ScaleDown"), "{stray}");
        assert_eq!(
            errors_of(|s| {
                s.consumers = ConsumerPolicy::None;
                s.acknowledge_running_consumers = true;
            }),
            Vec::<String>::new()
        );
    }

    #[test]
    fn paths_name_each_bad_glob_and_do_not_go_with_a_new_claim() {
        let paths = |include: &[&str], exclude: &[&str]| PathRestore {
            include: include.iter().map(|p| p.to_string()).collect(),
            exclude: exclude.iter().map(|p| p.to_string()).collect(),
            mirror: false,
        };
        assert_eq!(
            errors_of(|s| s.paths = Some(paths(&["db", "conf/*.yaml"], &["db/cache"]))),
            Vec::<String>::new()
        );
        one_error("spec.paths.include", |s| s.paths = Some(paths(&[], &[])));
        let absolute = one_error("spec.paths.include[1]", |s| {
            s.paths = Some(paths(&["db", "/etc"], &[]))
        });
        assert!(absolute.contains("\"/etc\""), "{absolute}");
        one_error("spec.paths.exclude[0]", |s| {
            s.paths = Some(paths(&["db"], &["../x"]))
        });
        one_error("spec.pvcPaths[\"shop/data\"].include[0]", |s| {
            s.pvc_paths = [("shop/data".to_string(), paths(&["a/[b"], &[]))].into()
        });
        one_error("spec.pvcPaths[\"data\"]", |s| {
            s.pvc_paths = [("data".to_string(), paths(&["a"], &[]))].into()
        });
        let new_claim = one_error("spec.paths", |s| {
            s.paths = Some(paths(&["db"], &[]));
            s.target = RestoreTarget::NewClaim;
        });
        assert!(new_claim.contains("NewClaim"), "{new_claim}");
    }

    /// Only the path `db`.
    fn db_only() -> PathRestore {
        PathRestore {
            include: vec!["db".into()],
            ..Default::default()
        }
    }

    #[test]
    fn method_and_extra_files_are_for_whole_volumes_put_back_in_place() {
        use ExtraFiles::{Delete, Keep};
        use RestoreMethod::{Direct, Staged};
        use RestoreTarget::{InPlace, NewClaim};
        let refusals = [
            (
                "spec.method",
                Staged,
                Delete,
                NewClaim,
                None,
                "but spec.target is NewClaim",
            ),
            (
                "spec.extraFiles",
                Direct,
                Keep,
                NewClaim,
                None,
                "holds only the backup",
            ),
            (
                "spec.extraFiles",
                Direct,
                Keep,
                InPlace,
                Some(db_only()),
                "spec.paths.mirror",
            ),
        ];
        for (field, method, extra_files, target, paths, says) in refusals {
            let error = one_error(field, |s| {
                (s.method, s.extra_files, s.target, s.paths) = (method, extra_files, target, paths)
            });
            // What to do: drop the choice, or restore whole volumes in place.
            let what_to_do = format!("; remove {field}");
            assert!(
                error.contains(says) && error.contains(&what_to_do),
                "{error}"
            );
        }
        let both = errors_of(|s| {
            s.method = RestoreMethod::Staged;
            s.extra_files = ExtraFiles::Keep;
            s.target = RestoreTarget::NewClaim;
        });
        assert_eq!(both.len(), 2, "{both:#?}");
        assert!(both[0].starts_with("spec.method: ") && both[1].starts_with("spec.extraFiles: "));

        for method in [RestoreMethod::Direct, RestoreMethod::Staged] {
            for extra_files in [ExtraFiles::Delete, ExtraFiles::Keep] {
                assert_eq!(
                    errors_of(|s| {
                        s.method = method;
                        s.extra_files = extra_files;
                    }),
                    Vec::<String>::new(),
                    "{method:?} {extra_files:?}"
                );
            }
        }
        // A path restore fills a scratch claim first anyway.
        assert_eq!(
            errors_of(|s| {
                s.method = RestoreMethod::Staged;
                s.paths = Some(db_only());
            }),
            Vec::<String>::new()
        );
        // The PVCs without paths of their own are whole volumes, whose files are kept.
        assert_eq!(
            errors_of(|s| {
                s.extra_files = ExtraFiles::Keep;
                s.pvc_paths = [("shop/data-db-0".to_string(), db_only())].into();
            }),
            Vec::<String>::new()
        );
    }

    #[test]
    fn workloads_are_switched_only_onto_new_claims() {
        let in_place = one_error("spec.switchWorkloads", |s| s.switch_workloads = true);
        assert!(
            in_place.contains("set spec.target to NewClaim"),
            "{in_place}"
        );
        assert_eq!(
            errors_of(|s| {
                s.switch_workloads = true;
                s.target = RestoreTarget::NewClaim;
            }),
            Vec::<String>::new()
        );
    }

    #[test]
    fn exactly_one_backup_source() {
        let both = errors_of(|s| s.schedule_name = Some("daily".into()));
        assert!(
            both[0].starts_with("spec.backupName and spec.scheduleName are both set"),
            "{both:?}"
        );
        let neither = errors_of(|s| s.backup_name = None);
        assert!(neither[0].contains("both missing"), "{neither:?}");
        one_error("spec.backupName", |s| {
            s.backup_name = Some("Nightly Backup".into())
        });
        one_error("spec.scheduleName", |s| {
            s.backup_name = None;
            s.schedule_name = Some(String::new());
        });
    }

    #[test]
    fn something_must_be_selected() {
        let e = one_error(
            "spec.pvcs, spec.includedNamespaces and spec.selector",
            |s| s.pvcs.clear(),
        );
        assert!(e.contains("no PVC is selected"), "{e}");
    }

    #[test]
    fn pvc_entries_are_namespace_slash_name() {
        let e = one_error("spec.pvcs[0]", |s| s.pvcs = vec!["noslash".into()]);
        assert!(e.contains("namespace/name"), "{e}");
        one_error("spec.pvcs[1]", |s| s.pvcs.push("a/b/c".into()));
        one_error("spec.pvcs[1]", |s| s.pvcs.push("/data".into()));
        let e = one_error("spec.pvcs[0]", |s| s.pvcs = vec!["Shop_1/data".into()]);
        assert!(e.contains("not a namespace name"), "{e}");
        let e = one_error("spec.pvcs[0]", |s| s.pvcs = vec!["shop/Data".into()]);
        assert!(e.contains("not a PVC name"), "{e}");
        let e = one_error("spec.pvcs[0]", |s| s.pvcs = vec!["shop/a.-b".into()]);
        assert!(e.contains("not a PVC name"), "{e}");
        // A claim name may be longer than a DNS label: only the whole is bounded.
        let long = format!("shop/{}", "d".repeat(64));
        assert_eq!(errors_of(|s| s.pvcs = vec![long]), Vec::<String>::new());
    }

    #[test]
    fn a_pvc_named_twice_is_refused() {
        let e = one_error("spec.pvcs[2]", |s| {
            s.pvcs.push("shop/data-db-1".into());
            s.pvcs.push("shop/data-db-0".into());
        });
        assert!(e.contains("already spec.pvcs[0]"), "{e}");
    }

    #[test]
    fn included_namespaces_are_namespace_names() {
        one_error("spec.includedNamespaces[1]", |s| {
            s.included_namespaces = vec!["shop".into(), "NOT OK".into()]
        });
        one_error("spec.includedNamespaces[0]", |s| {
            s.included_namespaces = vec![String::new()]
        });
    }

    #[test]
    fn selector_operators_and_values_are_checked() {
        let expr = |op: &str, values: Option<Vec<String>>| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: op.into(),
                values,
            }]),
            ..Default::default()
        };
        one_error("spec.selector.matchExpressions[0].operator", |s| {
            s.selector = Some(expr("Like", None))
        });
        one_error("spec.selector.matchExpressions[0].values", |s| {
            s.selector = Some(expr("In", None))
        });
        one_error("spec.selector.matchExpressions[0].values", |s| {
            s.selector = Some(expr("Exists", Some(vec!["x".into()])))
        });
        one_error("spec.selector.matchLabels", |s| {
            s.selector = Some(LabelSelector {
                match_labels: Some([("bad key".to_string(), "x".to_string())].into()),
                ..Default::default()
            })
        });
        let e = one_error("spec.selector.matchLabels[\"app\"]", |s| {
            s.selector = Some(LabelSelector {
                match_labels: Some([("app".to_string(), "no spaces".to_string())].into()),
                ..Default::default()
            })
        });
        assert!(e.contains("\"no spaces\" is not a label value"), "{e}");
        one_error("spec.selector.matchExpressions[0].values[1]", |s| {
            s.selector = Some(expr("NotIn", Some(vec!["ok".into(), "-x".into()])))
        });
    }

    #[test]
    fn candidate_nodes_keys_and_names_are_checked() {
        let e = one_error("spec.candidateNodes[\"noslash\"]", |s| {
            s.candidate_nodes = [("noslash".to_string(), vec!["node-a".to_string()])].into()
        });
        assert!(e.contains("namespace/name"), "{e}");
        one_error("spec.candidateNodes[\"shop/data-db-0\"]", |s| {
            s.candidate_nodes = [("shop/data-db-0".to_string(), vec![])].into()
        });
        one_error("spec.candidateNodes[\"shop/data-db-0\"]", |s| {
            s.candidate_nodes = [("shop/data-db-0".to_string(), vec!["Node A".to_string()])].into()
        });
    }

    #[test]
    fn durations_must_parse_and_be_positive() {
        let e = one_error("spec.timeout", |s| s.timeout = Some("soon".into()));
        assert!(e.contains("like 30m"), "{e}");
        let e = one_error("spec.volumeTimeout", |s| {
            s.volume_timeout = Some("0s".into())
        });
        assert!(e.contains("is zero"), "{e}");
        let e = one_error("spec.timeout", |s| s.timeout = Some("-5m".into()));
        assert!(e.contains("negative"), "{e}");
        one_error("spec.timeout", |s| s.timeout = Some(String::new()));
        assert!(duration("1h30m").is_ok());
    }

    #[test]
    fn parallel_zero_is_refused() {
        let e = one_error("spec.parallel", |s| s.parallel = Some(0));
        assert!(e.contains("1 or more"), "{e}");
    }

    #[test]
    fn images_are_references() {
        for good in [
            "pause",
            "registry.k8s.io/pause:3.10",
            "localhost:5000/a/b_c.d-e:tag",
            "velero/velero@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(image_reference(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            " ",
            "velero/velero: v1",
            "velero /velero",
            "Velero/velero",
            "velero/velero:",
            "velero/velero@sha256:xyz",
            "velero//velero",
            "host:port/x",
        ] {
            assert!(image_reference(bad).is_err(), "{bad:?} passed");
        }
        let e = one_error("spec.restoreHelper.image", |s| {
            s.restore_helper = Some(RestoreHelperOverrides {
                image: Some("velero/velero :v1".into()),
                ..Default::default()
            })
        });
        assert!(e.contains("space"), "{e}");
        let e = one_error("spec.standInImage", |s| {
            s.stand_in_image = Some(String::new())
        });
        assert!(e.contains("empty"), "{e}");
        one_error("spec.restoreHelper.command", |s| {
            s.restore_helper = Some(RestoreHelperOverrides {
                command: Some(vec![]),
                ..Default::default()
            })
        });
    }

    #[test]
    fn quantities_parse_as_kubernetes_reads_them() {
        assert!((quantity("100m").unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(quantity("1Ki"), Ok(1024.0));
        assert_eq!(quantity("2e3"), Ok(2000.0));
        assert_eq!(quantity(".5"), Ok(0.5));
        for bad in ["", "lots", "1 Gi", "1GB", "1.2.3", "-1", "1e"] {
            assert!(quantity(bad).is_err(), "{bad:?} passed");
        }
        let resources = |cpu_request: &str, cpu_limit: &str| RestoreHelperOverrides {
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), Quantity(cpu_request.into()))].into()),
                limits: Some([("cpu".to_string(), Quantity(cpu_limit.into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = one_error("spec.restoreHelper.resources.requests.cpu", |s| {
            s.restore_helper = Some(resources("lots", "1"))
        });
        assert!(e.contains("not a quantity"), "{e}");
        let e = one_error("spec.restoreHelper.resources.requests.cpu", |s| {
            s.restore_helper = Some(resources("2", "500m"))
        });
        assert!(e.contains("more than the limit"), "{e}");
    }

    #[test]
    fn every_message_names_its_field_first() {
        let spec = DataRestoreSpec {
            pvcs: vec!["x".into()],
            timeout: Some("soon".into()),
            parallel: Some(0),
            stand_in_image: Some(String::new()),
            ..Default::default()
        };
        let errors = spec_errors(&spec);
        assert_eq!(errors.len(), 5, "{errors:#?}");
        for e in &errors {
            assert!(e.starts_with("spec."), "{e}");
        }
    }
}
