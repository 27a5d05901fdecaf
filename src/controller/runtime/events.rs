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

/// The longest note an Event may carry (events.k8s.io/v1).
const NOTE_LIMIT: usize = 1024;

/// The notes of one kind from one pass as one Event note: all of them while they fit,
/// else as many as fit and how many more there were. A pass of a large restore has
/// news of hundreds of volumes or consumers; one Event each would be hundreds of
/// requests and etcd keys, and past [`WAITING`] they would be dropped anyway.
fn summary(notes: &[String]) -> String {
    let mut sorted: Vec<&String> = notes.iter().collect();
    sorted.sort();
    let mut out = String::new();
    for (i, note) in sorted.iter().enumerate() {
        let more = sorted.len() - i;
        let tail = format!("; and {more} more");
        let sep = if out.is_empty() { "" } else { "; " };
        let last = i + 1 == sorted.len();
        let room = if last { 0 } else { tail.len() + 16 };
        if out.len() + sep.len() + note.len() + room > NOTE_LIMIT {
            out.push_str(&tail);
            return out;
        }
        out.push_str(sep);
        out.push_str(note);
    }
    out
}

/// The news of one kind from one pass, each note with the object it is about, as one
/// Event: its note (see [`summary`]) and its related object, the one the first note in
/// order is about. The recorder folds Events of one reason, object and related object
/// into a series that keeps the first note, so news of the next pass under the same
/// reason would be lost; a volume or consumer is named by news of one kind once in a
/// restore, so its first object tells each pass's Event apart.
pub(crate) fn digest(
    news: Vec<(String, Option<ObjectReference>)>,
) -> (String, Option<ObjectReference>) {
    let related = news
        .iter()
        .min_by(|a, b| a.0.cmp(&b.0))
        .and_then(|(_, about)| about.clone());
    let notes: Vec<String> = news.into_iter().map(|(note, _)| note).collect();
    (summary(&notes), related)
}

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

    #[test]
    fn a_digest_is_about_the_object_of_its_first_note() {
        let about = |name: &str| ObjectReference {
            name: Some(name.into()),
            ..Default::default()
        };
        let (note, related) = digest(vec![
            ("shop/web restored".into(), Some(about("web"))),
            ("blog/data restored".into(), Some(about("data"))),
        ]);
        assert_eq!(note, "blog/data restored; shop/web restored");
        assert_eq!(related, Some(about("data")));
        assert_eq!(digest(Vec::new()), (String::new(), None));
    }

    #[test]
    fn the_news_of_a_pass_fit_one_event() {
        let one = vec!["scaled Deployment shop/web from 2 to 0".to_string()];
        assert_eq!(summary(&one), one[0], "a single note as it is");
        let two = vec!["scaled b".to_string(), "scaled a".to_string()];
        assert_eq!(
            summary(&two),
            "scaled a; scaled b",
            "sorted, whatever order they came in"
        );
        let many: Vec<String> = (0..100)
            .map(|i| format!("scaled Deployment bench-r{i:03}/app from 1 to 0"))
            .collect();
        let note = summary(&many);
        assert!(note.len() <= NOTE_LIMIT, "{}", note.len());
        assert!(
            note.starts_with("scaled Deployment bench-r000/app from 1 to 0; "),
            "{note}"
        );
        let shown = note.matches("scaled Deployment").count();
        assert!(
            note.ends_with(&format!("; and {} more", 100 - shown)),
            "{note}"
        );
    }
}
