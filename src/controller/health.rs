//! `/healthz` and `/readyz` for the Deployment's probes. The answers are fixed-size, so a
//! few lines over a TCP listener do what an HTTP framework would.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::warn;

/// Serves the probes until the process ends; `ready` flips once the controller watches.
pub async fn serve(addr: SocketAddr, ready: Arc<AtomicBool>) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    loop {
        let (mut stream, _) = listener.accept().await?;
        let ready = ready.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let n = stream.read(&mut buf).await.unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let ok = match path {
                "/healthz" => true,
                "/readyz" => ready.load(Ordering::Relaxed),
                _ => false,
            };
            let (code, body) = match (path, ok) {
                ("/healthz" | "/readyz", true) => ("200 OK", "ok\n"),
                ("/healthz" | "/readyz", false) => ("503 Service Unavailable", "not ready\n"),
                _ => ("404 Not Found", "not found\n"),
            };
            let response = format!(
                "HTTP/1.1 {code}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            if let Err(e) = stream.write_all(response.as_bytes()).await {
                warn!("probe answer lost: {e}");
            }
        });
    }
}
