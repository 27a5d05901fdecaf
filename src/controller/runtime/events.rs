//! Events go out on the side, a few at a time, and at most [`WAITING`] wait their turn.
//!
//! A pass of a large restore makes an Event per volume. Each sent from a task of its
//! own held its request open until the API server took it: ten thousand at once in a
//! restore of ten thousand claims, each with its buffers, and all of them competing
//! with the restore's own requests (the API server answers too many at once with 429,
//! which lost them anyway). An Event is news, not a record (the volumes' records and
//! the status are): past the bound, an Event is dropped and the log says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};
use tokio::sync::Semaphore;
use tracing::debug;

/// Events sent at once.
const IN_FLIGHT: usize = 4;
/// Events sent or waiting to be, at most.
const WAITING: usize = 1024;

/// Publishes Events with bounded concurrency and a bounded queue.
pub(crate) struct Events {
    recorder: Recorder,
    in_flight: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
    limit: usize,
    dropped: AtomicUsize,
}

impl Events {
    pub(crate) fn new(client: Client, reporter: Reporter) -> Self {
        Self::with_limits(client, reporter, IN_FLIGHT, WAITING)
    }

    fn with_limits(client: Client, reporter: Reporter, in_flight: usize, limit: usize) -> Self {
        Events {
            recorder: Recorder::new(client, reporter),
            in_flight: Arc::new(Semaphore::new(in_flight)),
            waiting: Arc::new(AtomicUsize::new(0)),
            limit,
            dropped: AtomicUsize::new(0),
        }
    }

    /// Sends `event` about `reference` once a slot is free, or drops it if too many
    /// wait already. Never waits: a volume's next step does not wait for the news of
    /// its last.
    pub(crate) fn send(&self, event: Event, reference: ObjectReference) {
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.limit {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            debug!(
                reason = %event.reason,
                dropped,
                "event dropped: {} already wait to be sent",
                self.limit
            );
            return;
        }
        let recorder = self.recorder.clone();
        let in_flight = self.in_flight.clone();
        let waiting = self.waiting.clone();
        tokio::spawn(async move {
            // The semaphore is never closed.
            let _slot = in_flight.acquire_owned().await;
            if let Err(e) = recorder.publish(&event, &reference).await {
                debug!("event not published: {e}");
            }
            waiting.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Events dropped since the start.
    #[cfg(test)]
    fn dropped(&self) -> usize {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;
    use kube::runtime::events::EventType;

    #[tokio::test]
    async fn past_the_bound_events_are_dropped_not_queued() {
        // An API server that never answers: every send stays in flight or waiting.
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let reporter = Reporter {
            controller: "refill".into(),
            instance: None,
        };
        let events = Events::with_limits(client, reporter, 1, 3);
        let reference = ObjectReference {
            kind: Some("DataRestore".into()),
            namespace: Some("velero".into()),
            name: Some("nightly".into()),
            ..Default::default()
        };
        for i in 0..10 {
            events.send(
                Event {
                    type_: EventType::Normal,
                    reason: format!("Step{i}"),
                    note: None,
                    action: "Step".into(),
                    secondary: None,
                },
                reference.clone(),
            );
        }
        // One request reaches the server; the other two wait for its slot.
        let (request, _reply) = handle.next_request().await.expect("a request");
        assert_eq!(request.method(), http::Method::POST);
        tokio::task::yield_now().await;
        assert_eq!(events.dropped(), 7);
        assert_eq!(events.waiting.load(Ordering::Acquire), 3);
    }
}
