//! What a team writes into a DataRestoreRequest, and an admin into a schedule, thrown
//! at the controller's decisions as arbitrary text: refused by field, never a panic
//! (see `crate::hostile_input` for the shared generators).

use std::collections::BTreeSet;

use proptest::prelude::*;

use crate::api::{DataRestoreRequestSpec, DataRestoreScheduleSpec};
use crate::hostile_input::hostile_text;

use super::request::decide::{data_restore_name, data_restore_spec};
use super::schedule::decide::spec_errors as schedule_errors;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn requests_are_refused_by_field_never_with_a_panic(
        namespace in hostile_text(),
        name in hostile_text(),
        uid in hostile_text(),
        backup in hostile_text(),
        pvcs in prop::collection::vec(hostile_text(), 0..5),
        candidates in prop::collection::btree_map(hostile_text(), prop::collection::vec(hostile_text(), 0..3), 0..3),
        volume_timeout in prop::option::of(hostile_text()),
    ) {
        let made = data_restore_name(&namespace, &name, &uid);
        prop_assert!(made.chars().count() <= 63, "{made}");
        let request = DataRestoreRequestSpec {
            backup_name: backup,
            pvcs,
            candidate_nodes: candidates,
            volume_timeout,
            ..Default::default()
        };
        let backed_up: BTreeSet<String> = [namespace.clone()].into();
        if let Err(errors) = data_restore_spec(&namespace, &request, &backed_up) {
            for error in errors {
                prop_assert!(error.starts_with("spec."), "{error}");
            }
        }
    }

    #[test]
    fn schedules_are_refused_by_field_never_with_a_panic(
        cron in prop::option::of(prop_oneof![
            hostile_text(),
            "[0-9*/,\\- ]{0,30}",
            "(@[a-z]{0,10})",
        ]),
        velero_schedule in prop::option::of(hostile_text()),
        backup in prop::option::of(hostile_text()),
    ) {
        let mut spec = DataRestoreScheduleSpec {
            cron,
            velero_schedule,
            ..Default::default()
        };
        spec.template.backup_name = backup;
        for error in schedule_errors(&spec) {
            prop_assert!(error.starts_with("spec."), "{error}");
        }
    }
}
