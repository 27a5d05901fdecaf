//! `/healthz` and `/readyz` for the Deployment's probes, and `/metrics` for Prometheus.
//! Each answer is one GET and one body, so a few lines over a TCP listener do what an
//! HTTP framework would.
//!
//! Anything that reaches the pod's port may connect, and the liveness probe restarts
//! the controller when these answers stop, so the server is bounded on every side: a
//! failed accept (out of file descriptors) pauses instead of ending the server, a
//! connection must send its request within a deadline and take its answer within
//! another, a request head has a size cap, and past a cap of open connections new
//! ones are closed at once rather than queued.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use super::metrics::{self, Metrics};

/// How far the server lets each client go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; one more is closed unanswered.
    pub connections: i64,
    /// From the accept to the end of the request head.
    pub read_timeout: Duration,
    /// From the end of the request to the whole answer written.
    pub write_timeout: Duration,
    /// The largest request head read; a longer one is answered 431.
    pub request_bytes: usize,
}

impl Limits {
    /// The kubelet's probes and Prometheus' scrapes send their request the moment they
    /// connect, and the kubelet gives up after its probe timeout (1 s by default), so a
    /// connection still silent after 2 s is neither: it is closed. Holding the cap full
    /// then takes 2,000 new silent connections every second. Below the cap the probes
    /// are answered however many silent connections wait, and an open connection costs
    /// a file descriptor and a task of well under a kilobyte (the request buffer is
    /// only made once bytes arrive), so 4,096 of them stay within a few megabytes and
    /// the container's file limit (the runtime's default is far higher). The answer is
    /// at most the metrics text, a few kilobytes: 5 s is plenty for a reader that
    /// reads, and bounds one that does not. 8 KiB takes any real request head
    /// (the kubelet's is about 150 bytes, Prometheus' about 400).
    pub const DEFAULT: Limits = Limits {
        connections: 4096,
        read_timeout: Duration::from_secs(2),
        write_timeout: Duration::from_secs(5),
        request_bytes: 8 * 1024,
    };
}

/// A failed accept (EMFILE, ENFILE, ENOBUFS) is retried after this pause: retrying at
/// once would spin, while the descriptors the timeouts free come back within seconds.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Binds the server's address, so that a port already taken fails the start.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves the probes and the metrics until the process ends, within [`Limits::DEFAULT`];
/// `ready` flips once the controller watches (or stands by, see [`super::leader`]).
pub async fn serve(listener: TcpListener, ready: Arc<AtomicBool>, metrics: Arc<Metrics>) {
    serve_within(listener, ready, metrics, Limits::DEFAULT).await
}

/// [`serve`] within other limits.
pub async fn serve_within(
    listener: TcpListener,
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    limits: Limits,
) {
    let counts = metrics.http();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                counts.accept_errors.inc();
                warn!("the probe server cannot accept a connection: {e}");
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        let Some(slot) = Slot::take(&counts.open, limits.connections) else {
            counts.refused.inc();
            // Dropped here: closed at once, and the accept loop goes on.
            continue;
        };
        let ready = ready.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            answer_one(stream, &ready, &metrics, &limits).await;
            drop(slot);
        });
    }
}

/// One open connection's place under the cap, given back when dropped.
struct Slot(Gauge);

impl Slot {
    fn take(open: &Gauge, cap: i64) -> Option<Slot> {
        // Only the accept loop takes slots, so reading then adding cannot overshoot.
        if open.get() >= cap {
            return None;
        }
        open.inc();
        Some(Slot(open.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.dec();
    }
}

async fn answer_one(mut stream: TcpStream, ready: &AtomicBool, metrics: &Metrics, limits: &Limits) {
    let head = tokio::time::timeout(
        limits.read_timeout,
        read_head(&stream, limits.request_bytes),
    )
    .await;
    let (code, content_type, body) = match head {
        Ok(Ok(Head::Complete(head))) => answer(request_path(&head), ready, metrics),
        Ok(Ok(Head::TooLarge)) => (
            "431 Request Header Fields Too Large",
            TEXT,
            "request too large\n".to_string(),
        ),
        // Closed before a whole request, failed, or silent past the deadline: there
        // is no one to answer.
        Ok(Ok(Head::Closed)) | Ok(Err(_)) | Err(_) => return,
    };
    let response = format!(
        "HTTP/1.1 {code}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let written = tokio::time::timeout(limits.write_timeout, async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
    // Debug only: any client can cause these, and the log is not theirs to fill.
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!("probe answer lost: {e}"),
        Err(_) => debug!("probe answer not taken within {:?}", limits.write_timeout),
    }
}

/// What came of reading a request head.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// Up to and with the blank line that ends the head.
    Complete(Vec<u8>),
    /// Longer than the cap before its end.
    TooLarge,
    /// The client closed before the head ended.
    Closed,
}

/// Reads up to the end of the request head, at most `cap` bytes. Nothing is allocated
/// before the first bytes arrive, so a silent connection costs only its task.
async fn read_head(stream: &TcpStream, cap: usize) -> std::io::Result<Head> {
    let mut head = Vec::new();
    loop {
        stream.readable().await?;
        let room = cap + 1 - head.len();
        head.reserve_exact(room.min(1024));
        match stream.try_read_buf(&mut head) {
            Ok(0) => return Ok(Head::Closed),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
        if head_ends(&head) {
            return Ok(Head::Complete(head));
        }
        if head.len() > cap {
            return Ok(Head::TooLarge);
        }
    }
}

/// Whether `head` holds the blank line that ends an HTTP request head. A whole head
/// is read before answering: closing a socket with unread bytes resets it, and the
/// client may then lose the answer.
fn head_ends(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
}

/// The path of a request's target (`GET /readyz?verbose HTTP/1.1` → `/readyz`).
fn request_path(head: &[u8]) -> &str {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let target = std::str::from_utf8(line)
        .unwrap_or_default()
        .split_whitespace()
        .nth(1)
        .unwrap_or("/");
    target.split('?').next().unwrap_or(target)
}

const TEXT: &str = "text/plain";

fn answer(
    path: &str,
    ready: &AtomicBool,
    metrics: &Metrics,
) -> (&'static str, &'static str, String) {
    let probe = |ok: bool| {
        if ok {
            ("200 OK", TEXT, "ok\n".to_string())
        } else {
            ("503 Service Unavailable", TEXT, "not ready\n".to_string())
        }
    };
    match path {
        "/healthz" => probe(true),
        "/readyz" => probe(ready.load(Ordering::Relaxed)),
        "/metrics" => ("200 OK", metrics::CONTENT_TYPE, metrics.encode()),
        _ => ("404 Not Found", TEXT, "not found\n".to_string()),
    }
}

#[cfg(test)]
mod tests;
