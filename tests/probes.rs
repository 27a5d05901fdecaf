//! The probe server (`/healthz`, `/readyz`, `/metrics`) under clients that do not
//! play along: thousands of silent connections, more than the cap, a head that never
//! ends, and a process out of file descriptors. The liveness probe restarts the
//! controller when these answers stop, so none of this may stop them. No cluster:
//! each test serves on its own 127.0.0.1 port.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use refill::controller::runtime::health::{self, Limits};
use refill::controller::runtime::metrics::Metrics;
use refill_e2e::controller_process::get;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The out-of-files test lowers the process' open-file limit: no other test may
/// open a descriptor meanwhile, not even for its runtime.
static FILES: RwLock<()> = RwLock::new(());

/// Runs `test` on a runtime of its own, beside the other tests.
fn beside_others(test: impl Future<Output = ()>) {
    let _files = FILES.read().unwrap_or_else(|e| e.into_inner());
    runtime().block_on(test);
}

/// Runs `test` on a runtime of its own, while no other test runs.
fn alone(test: impl Future<Output = ()>) {
    let _files = FILES.write().unwrap_or_else(|e| e.into_inner());
    runtime().block_on(test);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

struct Server {
    port: u16,
    metrics: Arc<Metrics>,
}

impl Server {
    async fn start(limits: Limits) -> Server {
        let listener = health::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let metrics = Arc::new(Metrics::new());
        let ready = Arc::new(AtomicBool::new(true));
        tokio::spawn(health::serve_within(
            listener,
            ready,
            metrics.clone(),
            limits,
        ));
        Server { port, metrics }
    }

    fn open(&self) -> i64 {
        self.metrics.http().open.get()
    }

    /// Waits until `open` connections are held, failing after `within`.
    async fn until_open(&self, open: i64, within: Duration) {
        let deadline = Instant::now() + within;
        while self.open() != open {
            assert!(
                Instant::now() < deadline,
                "the server holds {} connections, not {open}, after {within:?}",
                self.open()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `GET path` answers 200 within `within`; how long it took.
    async fn answers_ok(&self, path: &str, within: Duration) -> Duration {
        let start = Instant::now();
        let answer = tokio::time::timeout(within, get(self.port, path))
            .await
            .unwrap_or_else(|_| panic!("{path} did not answer within {within:?}"))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{path}: {answer}");
        start.elapsed()
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(("127.0.0.1", self.port)).await.unwrap()
    }
}

/// The server closed `stream` (an end of file, or a reset) within `within`, having
/// sent nothing.
async fn closed_within(stream: &mut TcpStream, within: Duration) {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(within, stream.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(n)) => panic!(
            "the server answered {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(_) => panic!("the connection was still open after {within:?}"),
    }
}

/// Raises the open-file soft limit to the hard one, and fails unless that gives
/// room for `sockets` (both ends of each connection are in this process).
fn room_for(sockets: u64) {
    let limit = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    )
    .unwrap();
    let now = getrlimit(Resource::Nofile).current;
    assert!(
        now.is_none_or(|n| n >= sockets + 200),
        "the open-file limit is {now:?}, too low for {sockets} sockets: raise `ulimit -Hn`"
    );
}

#[test]
fn probes_answer_at_once_while_two_thousand_silent_connections_wait() {
    beside_others(async {
        const SILENT: usize = 2000;
        room_for(2 * SILENT as u64);
        let server = Server::start(Limits::DEFAULT).await;
        let start = Instant::now();
        let mut silent = Vec::with_capacity(SILENT);
        for _ in 0..SILENT {
            silent.push(server.connect().await);
        }
        server
            .until_open(SILENT as i64, Duration::from_secs(1))
            .await;
        let opened = start.elapsed();
        assert!(
            opened < Limits::DEFAULT.read_timeout,
            "opening {SILENT} connections took {opened:?}: the first may have timed out"
        );
        // The kubelet's probe gives up after 1 s by default.
        let healthz = server.answers_ok("/healthz", Duration::from_secs(1)).await;
        let readyz = server.answers_ok("/readyz", Duration::from_secs(1)).await;
        println!(
            "{SILENT} silent connections opened in {opened:?}; /healthz {healthz:?}, /readyz {readyz:?}"
        );
        assert!(
            server.open() >= SILENT as i64,
            "the silent connections were not all held while the probes were answered: {}",
            server.open()
        );
        // Past the read deadline every silent one is closed, and its task and slot gone.
        let within = Limits::DEFAULT.read_timeout + Duration::from_secs(3);
        server.until_open(0, within).await;
        println!("released after {:?}", start.elapsed());
        for stream in &mut silent {
            closed_within(stream, Duration::from_secs(1)).await;
        }
        assert_eq!(server.metrics.http().refused.get(), 0);
    });
}

#[test]
fn past_the_cap_new_connections_are_closed_at_once() {
    beside_others(async {
        let limits = Limits {
            connections: 8,
            read_timeout: Duration::from_secs(60),
            ..Limits::DEFAULT
        };
        let server = Server::start(limits).await;
        let mut held = Vec::new();
        for _ in 0..8 {
            held.push(server.connect().await);
        }
        server.until_open(8, Duration::from_secs(5)).await;
        let mut ninth = server.connect().await;
        closed_within(&mut ninth, Duration::from_secs(1)).await;
        assert_eq!(server.metrics.http().refused.get(), 1);
        // One of them leaves: its slot is free for the probe.
        drop(held.pop());
        server.until_open(7, Duration::from_secs(5)).await;
        server.answers_ok("/healthz", Duration::from_secs(1)).await;
        assert_eq!(server.open(), 7);
    });
}

#[test]
fn a_request_dripping_in_is_cut_at_the_read_deadline() {
    beside_others(async {
        let limits = Limits {
            read_timeout: Duration::from_millis(500),
            ..Limits::DEFAULT
        };
        let server = Server::start(limits).await;
        let mut stream = server.connect().await;
        let start = Instant::now();
        // A byte every 100 ms: each read is quick, the whole head never comes.
        let cut = loop {
            if stream.write_all(b"G").await.is_err() {
                break start.elapsed();
            }
            let mut buf = [0u8; 16];
            if let Ok(read) =
                tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await
            {
                assert!(!matches!(read, Ok(n) if n > 0), "the server answered");
                break start.elapsed();
            }
            assert!(
                start.elapsed() < Duration::from_secs(3),
                "still open after 3 s"
            );
        };
        assert!(cut >= limits.read_timeout, "cut after {cut:?}");
        server.until_open(0, Duration::from_secs(1)).await;
    });
}

#[test]
fn a_head_past_the_cap_is_answered_431() {
    beside_others(async {
        let server = Server::start(Limits::DEFAULT).await;
        let mut stream = server.connect().await;
        let mut head = b"GET /healthz HTTP/1.1\r\n".to_vec();
        head.extend(std::iter::repeat_n(b'x', Limits::DEFAULT.request_bytes));
        // The server may close as soon as it read past the cap, before all was sent.
        let _ = stream.write_all(&head).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 431 "), "answered {answer:?}");
    });
}

#[test]
fn a_process_out_of_file_descriptors_keeps_serving_once_some_are_free() {
    alone(async {
        room_for(1000);
        let server = Server::start(Limits::DEFAULT).await;
        server.answers_ok("/healthz", Duration::from_secs(1)).await;
        let before = getrlimit(Resource::Nofile);
        // A limit a little above the highest descriptor open now, then sockets made
        // (not connected) until none more can be: every descriptor below the limit is
        // taken, so the server's next accept fails with EMFILE.
        let highest = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u64>().ok())
            .max()
            .unwrap();
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(highest + 16),
                maximum: before.maximum,
            },
        )
        .unwrap();
        let mut sockets = Vec::new();
        while let Ok(socket) = TcpSocket::new_v4() {
            sockets.push(socket);
            assert!(sockets.len() < 1000, "sockets never ran out");
        }
        // Connecting takes no new descriptor on this side; accepting one does. A few
        // (the listener's backlog holds only so many unaccepted connections); the other
        // sockets stay open, taking their descriptors.
        let mut pending = Vec::new();
        for socket in sockets.drain(..8) {
            pending.push(
                socket
                    .connect(format!("127.0.0.1:{}", server.port).parse().unwrap())
                    .await
                    .unwrap(),
            );
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while server.metrics.http().accept_errors.get() == 0 {
            assert!(Instant::now() < deadline, "no accept failed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        setrlimit(Resource::Nofile, before).unwrap();
        // The server went on: it takes the waiting connections and answers the probe.
        server.answers_ok("/healthz", Duration::from_secs(2)).await;
        server
            .until_open(pending.len() as i64, Duration::from_secs(2))
            .await;
    });
}
