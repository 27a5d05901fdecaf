//! A scripted API server for the tests of one step's requests.
//!
//! Three layers test refill, each for its own question:
//!
//! - **Pure functions** (decisions, patches, builders) are tested beside them with
//!   plain values: what to do, and what a patch or an object holds. Most tests belong
//!   there.
//! - **This layer** asks what a step *sends*: the exact requests of one step in their
//!   order (method, path, query, patch type, the body's key fields), and what the step
//!   makes of each answer, a 404 or a 409 included. The step is called directly with a
//!   [`Client`] whose server is this script; no cluster, no sleeps, a few milliseconds.
//! - **The cluster tests** (`tests/`, `e2e/`) ask whether it all works against a real
//!   API server, kube-controller-manager, scheduler and Velero: admission, watches,
//!   timing, data moved.
//!
//! A script is a list of [`Expect`]s. Each request the step sends is held against the
//! next one; a request that differs is answered with a 500 and the test fails naming
//! both, and a scripted request that never came fails it too (see [`ApiMock::run`]).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// The Content-Type of a merge patch (`Patch::Merge`).
pub(crate) const MERGE_PATCH: &str = "application/merge-patch+json";
/// The Content-Type of a JSON patch (`Patch::Json`), whose `test` ops make it conditional.
pub(crate) const JSON_PATCH: &str = "application/json-patch+json";
/// The Content-Type of a server-side apply (`Patch::Apply`).
pub(crate) const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// How long a step may take before the test says which request it still waits for.
const STEP_BOUND: Duration = Duration::from_secs(10);

/// A check on a request's JSON body: `Err` says what differs.
type BodyCheck = Box<dyn Fn(&Value) -> Result<(), String> + Send>;

/// The body of an answer, made from the request's body.
type Answer = Box<dyn Fn(&Value) -> Value + Send>;

/// One request a step is expected to send, and the answer it gets.
pub(crate) struct Expect {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    content_type: Option<&'static str>,
    checks: Vec<BodyCheck>,
    status: u16,
    answer: Answer,
}

/// A `GET` of `path`.
pub(crate) fn get(path: &str) -> Expect {
    Expect::new(Method::GET, path)
}

/// A `POST` (create) to `path`.
pub(crate) fn post(path: &str) -> Expect {
    Expect::new(Method::POST, path)
}

/// A `PUT` (replace) of `path`.
pub(crate) fn put(path: &str) -> Expect {
    Expect::new(Method::PUT, path)
}

/// A `PATCH` of `path`, of the given Content-Type ([`MERGE_PATCH`], ...).
pub(crate) fn patch(path: &str, content_type: &'static str) -> Expect {
    Expect {
        content_type: Some(content_type),
        ..Expect::new(Method::PATCH, path)
    }
}

/// A `DELETE` of `path`.
pub(crate) fn delete(path: &str) -> Expect {
    Expect::new(Method::DELETE, path)
}

impl Expect {
    fn new(method: Method, path: &str) -> Self {
        Expect {
            method,
            path: path.to_string(),
            query: Vec::new(),
            content_type: None,
            checks: Vec::new(),
            status: 200,
            answer: Box::new(|_| json!({})),
        }
    }

    /// The query must carry `key=value` (compared decoded).
    pub(crate) fn query(mut self, key: &str, value: &str) -> Self {
        self.query.push((key.to_string(), value.to_string()));
        self
    }

    /// The body's value at the JSON `pointer` must be `value`; `""` is the whole body.
    pub(crate) fn body(self, pointer: &str, value: Value) -> Self {
        let at = place(pointer);
        let pointer = pointer.to_string();
        self.check(move |body| match body.pointer(&pointer) {
            Some(found) if *found == value => Ok(()),
            Some(found) => Err(format!("{at} is {found}, expected {value}")),
            None => Err(format!("{at} is absent, expected {value}")),
        })
    }

    /// The body must hold nothing at the JSON `pointer`.
    pub(crate) fn body_lacks(self, pointer: &str) -> Self {
        let at = place(pointer);
        let pointer = pointer.to_string();
        self.check(move |body| match body.pointer(&pointer) {
            None => Ok(()),
            Some(found) => Err(format!("{at} is {found}, expected nothing there")),
        })
    }

    /// The record a VolumePluginRestore's status write carries (one JSON text in
    /// `status.record`) must hold `value` at the JSON `pointer`.
    pub(crate) fn record_holds(self, pointer: &str, value: Value) -> Self {
        let pointer = pointer.to_string();
        self.check(move |body| {
            let sent = &body["status"]["record"];
            let text = sent
                .as_str()
                .ok_or_else(|| format!("status.record is {sent}, expected a JSON text"))?;
            let record: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
            match record.pointer(&pointer) {
                Some(found) if *found == value => Ok(()),
                found => Err(format!("record{pointer} is {found:?}, expected {value}")),
            }
        })
    }

    /// Any other check of the body; `Err` says what differs.
    pub(crate) fn check(
        mut self,
        check: impl Fn(&Value) -> Result<(), String> + Send + 'static,
    ) -> Self {
        self.checks.push(Box::new(check));
        self
    }

    /// Answers with `status` and the JSON `answer` (200 and `{}` unless said).
    pub(crate) fn answer(self, status: u16, answer: Value) -> Self {
        self.answer_with(status, move |_| answer.clone())
    }

    /// Answers with `status` and what `make` makes of the request's body: the object
    /// sent, say, with what the server sets (a UID).
    pub(crate) fn answer_with(
        mut self,
        status: u16,
        make: impl Fn(&Value) -> Value + Send + 'static,
    ) -> Self {
        self.status = status;
        self.answer = Box::new(make);
        self
    }

    /// Answers with the API server's refusal of `code` (a `Status` object), as it
    /// answers a conflict (409), a missing object (404) or an invalid one (422).
    pub(crate) fn refuse(self, code: u16, reason: &str) -> Self {
        let answer = json!({
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "message": format!("{reason} (scripted)"),
            "reason": reason,
            "code": code,
        });
        self.answer(code, answer)
    }

    fn describe(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// What differs between this expectation and `seen`, if anything.
    fn mismatch(&self, seen: &Seen) -> Option<String> {
        if seen.method != self.method || seen.path != self.path {
            return Some(format!("expected {}", self.describe()));
        }
        let mut wrong: Vec<String> = self
            .query
            .iter()
            .filter(|pair| !seen.query.contains(pair))
            .map(|(k, v)| format!("query {k}={v} missing (query: {:?})", seen.query))
            .collect();
        if let Some(expected) = self.content_type
            && seen.content_type.as_deref() != Some(expected)
        {
            wrong.push(format!(
                "Content-Type is {:?}, expected {expected}",
                seen.content_type
            ));
        }
        wrong.extend(
            self.checks
                .iter()
                .filter_map(|check| check(&seen.body).err()),
        );
        (!wrong.is_empty()).then(|| format!("{}; body: {}", wrong.join("; "), seen.body))
    }
}

/// How a message names the JSON `pointer`.
fn place(pointer: &str) -> String {
    match pointer {
        "" => "the body".to_string(),
        pointer => pointer.to_string(),
    }
}

/// A request as the server saw it.
struct Seen {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    content_type: Option<String>,
    body: Value,
}

impl Seen {
    async fn read(request: Request<Body>) -> Self {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        Seen {
            method: parts.method,
            path: parts.uri.path().to_string(),
            query: parts.uri.query().map(decode_query).unwrap_or_default(),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    fn describe(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// `a=b&c=d%2Fe` as decoded pairs.
fn decode_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(key), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What is left of the script, and the first thing that went wrong.
#[derive(Default)]
struct Script {
    expected: VecDeque<Expect>,
    answered: usize,
    failure: Option<String>,
}

impl Script {
    /// The answer to `seen`: the scripted one when it is the request expected next,
    /// else a 500, noting what went wrong.
    fn answer(&mut self, seen: &Seen) -> (u16, Value) {
        self.answered += 1;
        let n = self.answered;
        let why = match self.expected.pop_front() {
            None => format!(
                "unexpected request {n}, {}: the script had ended; body: {}",
                seen.describe(),
                seen.body
            ),
            Some(expected) => match expected.mismatch(seen) {
                None => return (expected.status, (expected.answer)(&seen.body)),
                Some(why) => format!("request {n}, {}: {why}", seen.describe()),
            },
        };
        self.failure.get_or_insert(why.clone());
        (
            500,
            json!({"kind": "Status", "status": "Failure", "message": why, "code": 500}),
        )
    }
}

/// The server side of a mocked [`Client`]: answers requests from its script.
pub(crate) struct ApiMock {
    script: Arc<Mutex<Script>>,
    server: tokio::task::JoinHandle<()>,
}

impl ApiMock {
    /// A client whose every request is answered from `script`, in order.
    pub(crate) fn new(script: impl IntoIterator<Item = Expect>) -> (Client, ApiMock) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let script = Arc::new(Mutex::new(Script {
            expected: script.into_iter().collect(),
            ..Script::default()
        }));
        let shared = script.clone();
        let server = tokio::spawn(async move {
            while let Some((request, reply)) = handle.next_request().await {
                let seen = Seen::read(request).await;
                let (status, body) = lock(&shared).answer(&seen);
                let response = Response::builder()
                    .status(status)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(body.to_string().into_bytes()))
                    .expect("a valid response");
                reply.send_response(response);
            }
        });
        let client = Client::new(service, "default");
        (client, ApiMock { script, server })
    }

    /// Runs `step` against the script and answers what it returned, once it is known
    /// that every request it sent was the one expected and every scripted request
    /// came. Panics naming the request otherwise.
    pub(crate) async fn run<T>(self, step: impl Future<Output = T>) -> T {
        let out = tokio::time::timeout(STEP_BOUND, step).await;
        let script = lock(&self.script);
        if let Some(failure) = &script.failure {
            panic!("{failure}");
        }
        let left: Vec<String> = script.expected.iter().map(Expect::describe).collect();
        match out {
            Err(_) => {
                panic!("the step did not end within {STEP_BOUND:?}; still expected: {left:?}")
            }
            Ok(_) if !left.is_empty() => panic!(
                "after {} requests, scripted requests never came: {left:?}",
                script.answered
            ),
            Ok(out) => out,
        }
    }
}

impl Drop for ApiMock {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn lock(script: &Mutex<Script>) -> std::sync::MutexGuard<'_, Script> {
    script
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use kube::api::ListParams;

    fn config_map(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
    }

    #[tokio::test]
    async fn answers_the_requests_scripted_in_order() {
        let (client, mock) = ApiMock::new([
            get("/api/v1/namespaces/a/configmaps/one").answer(200, config_map("one")),
            get("/api/v1/namespaces/a/configmaps")
                .query("labelSelector", "refill.dev/role=x")
                .answer(200, json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": []})),
            get("/api/v1/namespaces/a/configmaps/two").refuse(404, "NotFound"),
        ]);
        let api: Api<ConfigMap> = Api::namespaced(client, "a");
        let (one, list, two) = mock
            .run(async {
                let one = api.get("one").await.unwrap();
                let list = api
                    .list(&ListParams::default().labels("refill.dev/role=x"))
                    .await
                    .unwrap();
                (one, list, api.get_opt("two").await.unwrap())
            })
            .await;
        assert_eq!(one.metadata.name.as_deref(), Some("one"));
        assert!(list.items.is_empty());
        assert!(two.is_none(), "a 404 reads as absent");
    }

    #[tokio::test]
    #[should_panic(
        expected = "request 1, GET /api/v1/namespaces/a/configmaps/one: expected GET /api/v1/namespaces/a/configmaps/other"
    )]
    async fn a_request_other_than_the_one_expected_fails_naming_both() {
        let (client, mock) = ApiMock::new([get("/api/v1/namespaces/a/configmaps/other")]);
        let api: Api<ConfigMap> = Api::namespaced(client, "a");
        let _ = mock.run(api.get("one")).await;
    }

    #[tokio::test]
    #[should_panic(expected = "/data/k is \"v\", expected \"w\"")]
    async fn a_body_that_differs_fails_saying_where() {
        let (client, mock) = ApiMock::new([post("/api/v1/namespaces/a/configmaps")
            .body("/data/k", json!("w"))
            .answer(201, config_map("one"))]);
        let api: Api<ConfigMap> = Api::namespaced(client, "a");
        let mut made: ConfigMap = serde_json::from_value(config_map("one")).unwrap();
        made.data = Some([("k".to_string(), "v".to_string())].into());
        let _ = mock.run(api.create(&Default::default(), &made)).await;
    }

    #[tokio::test]
    #[should_panic(
        expected = "scripted requests never came: [\"DELETE /api/v1/namespaces/a/configmaps/one\"]"
    )]
    async fn a_scripted_request_that_never_came_fails() {
        let (_client, mock) = ApiMock::new([delete("/api/v1/namespaces/a/configmaps/one")]);
        mock.run(async {}).await;
    }

    #[test]
    fn queries_are_compared_decoded() {
        assert_eq!(
            decode_query("labelSelector=a.io%2Fb%3Dc&x=y+z"),
            [
                ("labelSelector".into(), "a.io/b=c".into()),
                ("x".into(), "y z".into())
            ]
        );
    }
}
