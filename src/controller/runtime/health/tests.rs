use super::*;

#[test]
fn a_head_ends_at_its_blank_line() {
    assert!(head_ends(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert!(head_ends(b"GET /healthz HTTP/1.0\n\n"));
    assert!(!head_ends(b"GET /healthz HTTP/1.1\r\nHost: x\r\n"));
    assert!(!head_ends(b"GET /healthz HTTP/1.1\r\n"));
    assert!(!head_ends(b""));
}

#[test]
fn the_path_is_the_target_without_its_query() {
    assert_eq!(
        request_path(b"GET /readyz?verbose HTTP/1.1\r\n\r\n"),
        "/readyz"
    );
    assert_eq!(
        request_path(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
        "/metrics"
    );
    assert_eq!(request_path(b"\r\n\r\n"), "/");
    assert_eq!(request_path(b"GET \xff\xfe HTTP/1.1\r\n\r\n"), "/");
}

#[test]
fn probes_answer_by_path_and_readiness() {
    let metrics = Metrics::new();
    let ready = AtomicBool::new(false);
    assert_eq!(answer("/healthz", &ready, &metrics).0, "200 OK");
    assert_eq!(
        answer("/readyz", &ready, &metrics).0,
        "503 Service Unavailable"
    );
    ready.store(true, Ordering::Relaxed);
    assert_eq!(answer("/readyz", &ready, &metrics).0, "200 OK");
    assert_eq!(answer("/nope", &ready, &metrics).0, "404 Not Found");
    let (code, content_type, body) = answer("/metrics", &ready, &metrics);
    assert_eq!((code, content_type), ("200 OK", metrics::CONTENT_TYPE));
    assert!(body.contains("refill_http_connections "), "{body}");
}

#[test]
fn slots_stop_at_the_cap_and_come_back_when_dropped() {
    let open = Gauge::default();
    let first = Slot::take(&open, 2).unwrap();
    let second = Slot::take(&open, 2).unwrap();
    assert!(Slot::take(&open, 2).is_none());
    assert_eq!(open.get(), 2);
    drop(first);
    assert_eq!(open.get(), 1);
    let third = Slot::take(&open, 2).unwrap();
    drop((second, third));
    assert_eq!(open.get(), 0);
}
