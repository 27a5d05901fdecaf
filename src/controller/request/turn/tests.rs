use super::*;
use crate::api::{DataRestoreRequestStatus, DataRestoreStatus, Phase};

fn at(text: &str) -> Option<Time> {
    Some(Time(text.parse().unwrap()))
}

/// Requests, each made `minute` minutes past midnight.
fn made(list: &[(&str, u32, Standing)]) -> Vec<Peer> {
    list.iter()
        .map(|&(name, minute, standing)| Peer {
            name: name.into(),
            created: at(&format!("2026-01-01T00:{minute:02}:00Z")),
            standing,
        })
        .collect()
}

#[test]
fn the_oldest_waiting_requests_take_the_places_the_carried_ones_leave() {
    let peers = made(&[
        ("late", 3, Standing::Waiting),
        ("running", 0, Standing::Carried),
        ("done", 0, Standing::Ended),
        ("early", 1, Standing::Waiting),
        ("middle", 2, Standing::Waiting),
    ]);
    assert_eq!(in_turn(&peers, 3), ["early", "middle"]);
    assert_eq!(in_turn(&peers, 1), Vec::<&str>::new());
    assert_eq!(in_turn(&peers, 10), ["early", "middle", "late"]);
}

#[test]
fn requests_made_at_once_go_by_name() {
    let peers = made(&[("b", 0, Standing::Waiting), ("a", 0, Standing::Waiting)]);
    assert_eq!(in_turn(&peers, 1), ["a"]);
    assert!(turn("shop", "a", &peers, 1).is_ok());
    assert!(turn("shop", "b", &peers, 1).is_err());
}

#[test]
fn a_request_past_the_cap_waits_naming_the_cap_and_the_flag() {
    let peers = made(&[
        ("first", 0, Standing::Carried),
        ("second", 1, Standing::Waiting),
        ("third", 2, Standing::Waiting),
    ]);
    let why = turn("shop", "third", &peers, 2).unwrap_err();
    for said in [
        "1 DataRestoreRequest(s) of namespace shop being carried out and 1 waiting ahead",
        "at most 2 per namespace",
        "--requests-per-namespace=2",
    ] {
        assert!(why.contains(said), "{why}");
    }
    assert!(turn("shop", "second", &peers, 2).is_ok());
    // The carried one ends: the next begins.
    let peers = made(&[
        ("first", 0, Standing::Ended),
        ("second", 1, Standing::Carried),
        ("third", 2, Standing::Waiting),
    ]);
    assert!(turn("shop", "third", &peers, 2).is_ok());
}

fn request(status: Option<DataRestoreRequestStatus>, generation: i64) -> DataRestoreRequest {
    let mut request = DataRestoreRequest::new("r", Default::default());
    request.metadata.generation = Some(generation);
    request.status = status;
    request
}

fn status(phase: Phase, carried_by: Option<&str>, observed: i64) -> DataRestoreRequestStatus {
    DataRestoreRequestStatus {
        data_restore: carried_by.map(String::from),
        restore: DataRestoreStatus {
            phase,
            observed_generation: Some(observed),
            ..Default::default()
        },
    }
}

#[test]
fn a_request_stands_by_its_status() {
    assert_eq!(standing(&request(None, 1)), Standing::Waiting);
    let carried = status(Phase::Restoring, Some("velero/req-r"), 1);
    assert_eq!(standing(&request(Some(carried), 1)), Standing::Carried);
    let done = status(Phase::Completed, Some("velero/req-r"), 1);
    assert_eq!(standing(&request(Some(done), 2)), Standing::Ended);
    let refused = status(Phase::Failed, None, 1);
    assert_eq!(
        standing(&request(Some(refused.clone()), 1)),
        Standing::Ended
    );
    // Fixed after it was refused: it is looked at again, so it waits for its turn.
    assert_eq!(standing(&request(Some(refused), 2)), Standing::Waiting);
    let mut deleting = request(Some(status(Phase::Restoring, Some("velero/req-r"), 1)), 1);
    deleting.metadata.deletion_timestamp = at("2026-01-01T00:00:00Z");
    assert_eq!(standing(&deleting), Standing::Ended);
}
