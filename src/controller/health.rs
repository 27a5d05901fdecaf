//! `/healthz` and `/readyz` for the Deployment's probes, and `/metrics` for Prometheus.
//! Each answer is one GET and one body, so a few lines over a TCP listener do what an
//! HTTP framework would.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::warn;

use super::metrics::{self, Metrics};

/// Serves the probes and the metrics until the process ends; `ready` flips once the
/// controller watches (or stands by, see [`super::leader`]).
pub async fn serve(
    addr: SocketAddr,
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    loop {
        let (mut stream, _) = listener.accept().await?;
        let ready = ready.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let n = stream.read(&mut buf).await.unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]);
            let target = request.split_whitespace().nth(1).unwrap_or("/");
            let path = target.split('?').next().unwrap_or(target);
            let (code, content_type, body) = answer(path, &ready, &metrics);
            let response = format!(
                "HTTP/1.1 {code}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            if let Err(e) = stream.write_all(response.as_bytes()).await {
                warn!("probe answer lost: {e}");
            }
        });
    }
}

fn answer(
    path: &str,
    ready: &AtomicBool,
    metrics: &Metrics,
) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain";
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
