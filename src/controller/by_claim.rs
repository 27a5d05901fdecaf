//! The restore's volumes or consumers by the claim they concern, found once per pass.
//!
//! A pass asks, for every consumer, where its volumes are, and for every volume, which
//! consumers it holds stopped. Each answer found by a scan of the other list made every
//! pass of a restore of N claims cost N², and at the default `parallel: 8` a restore
//! makes passes in proportion to N.

use std::collections::HashMap;

use crate::api::{ConsumerRecord, VolumeStatus};

/// Items by claim (`namespace/name`), each claim's in the order of the list they came
/// from.
pub(crate) struct ByClaim<'a, T> {
    items: HashMap<&'a str, Vec<&'a T>>,
}

impl<'a> ByClaim<'a, VolumeStatus> {
    /// Each volume under its PVC.
    pub(crate) fn volumes(volumes: &'a [VolumeStatus]) -> Self {
        Self::of_each(volumes, |v| std::slice::from_ref(&v.pvc))
    }
}

impl<'a> ByClaim<'a, ConsumerRecord> {
    /// Each consumer under every claim it mounts.
    pub(crate) fn consumers(consumers: &'a [ConsumerRecord]) -> Self {
        Self::of_each(consumers, |c| &c.pvcs)
    }
}

impl<'a, T> ByClaim<'a, T> {
    fn of_each(list: &'a [T], claims: impl Fn(&'a T) -> &'a [String]) -> Self {
        let mut items: HashMap<&'a str, Vec<&'a T>> = HashMap::new();
        for item in list {
            for claim in claims(item) {
                let under = items.entry(claim.as_str()).or_default();
                // A claim named twice in one record counts the record once.
                if !under.last().is_some_and(|last| std::ptr::eq(*last, item)) {
                    under.push(item);
                }
            }
        }
        ByClaim { items }
    }

    /// What concerns `claim`; nothing when the restore has none.
    pub(crate) fn of(&self, claim: &str) -> &[&'a T] {
        self.items.get(claim).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_claim_keeps_its_records_in_order_and_once() {
        let consumer = |name: &str, pvcs: &[&str]| ConsumerRecord {
            name: name.into(),
            pvcs: pvcs.iter().map(|p| p.to_string()).collect(),
            ..crate::controller::testing::fixtures::consumer()
        };
        let consumers = [
            consumer("web", &["shop/a", "shop/b", "shop/a"]),
            consumer("db", &["shop/b"]),
        ];
        let index = ByClaim::consumers(&consumers);
        let names = |claim: &str| -> Vec<&str> {
            index.of(claim).iter().map(|c| c.name.as_str()).collect()
        };
        assert_eq!(names("shop/a"), ["web"]);
        assert_eq!(names("shop/b"), ["web", "db"]);
        assert!(names("shop/c").is_empty());
    }
}
