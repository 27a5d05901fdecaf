//! Which claims exist and which are being deleted, kept from a metadata watch of PVCs.
//!
//! A claim deleted while it is restored must end its volume, and its deletion shows only
//! on the claim itself (the stand-in pod keeps it from going). Reading every active
//! claim on every pass would cost a request per volume; the watch costs none.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;

use crate::watched::Watched;

type Key = (String, String);
type Meta = PartialObjectMeta<PersistentVolumeClaim>;

/// `(namespace, name)` → being deleted.
#[derive(Default)]
pub(crate) struct Claims(Watched<Key, bool>);

fn entry(meta: &Meta) -> (Key, bool) {
    (
        (meta.namespace().unwrap_or_default(), meta.name_any()),
        meta.metadata.deletion_timestamp.is_some(),
    )
}

impl Claims {
    pub(crate) fn apply(&self, event: &Event<Meta>) {
        self.0.apply(event, entry);
    }

    /// Whether the claim is gone or being deleted; None before the first list is done.
    pub(crate) fn deleted(&self, namespace: &str, name: &str) -> Option<bool> {
        let known = self.0.get(&(namespace.to_string(), name.to_string()))?;
        Some(known.unwrap_or(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn meta(name: &str, deleting: bool) -> Meta {
        let mut m = Meta::default();
        m.metadata.namespace = Some("shop".into());
        m.metadata.name = Some(name.into());
        m.metadata.deletion_timestamp = deleting.then(|| Time(Timestamp::from_second(1).unwrap()));
        m
    }

    #[test]
    fn knows_nothing_before_the_first_list_then_follows_deletions() {
        let claims = Claims::default();
        assert_eq!(claims.deleted("shop", "data"), None);
        claims.apply(&Event::Init);
        claims.apply(&Event::InitApply(meta("data", false)));
        claims.apply(&Event::InitDone);
        assert_eq!(claims.deleted("shop", "data"), Some(false));
        assert_eq!(claims.deleted("shop", "other"), Some(true));
        claims.apply(&Event::Apply(meta("data", true)));
        assert_eq!(claims.deleted("shop", "data"), Some(true));
        claims.apply(&Event::Delete(meta("data", true)));
        assert_eq!(claims.deleted("shop", "data"), Some(true));
    }
}
