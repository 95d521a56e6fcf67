//! An identity provider's key endpoints under the test's control, on 127.0.0.1: the JWKS at
//! `/jwks` and RFC 8414 metadata at `/.well-known/oauth-authorization-server` (OpenID Connect
//! discovery answers 404, so the gateway falls back to RFC 8414). Each endpoint can answer at
//! once, after a delay, never (within a minute), with an error status, or with an oversized
//! body; every request is counted, and so is every answer actually sent.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Response, StatusCode, header};
use axum::routing::get;
use serde_json::{Value, json};

/// How an endpoint answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// At once.
    Serve,
    /// After this long.
    Delay(Duration),
    /// Not within a minute (the client gives up first).
    Hang,
    /// At once, with this status and an empty JSON object.
    Fail(u16),
    /// At once, the document padded with a member of this many bytes.
    Oversized(usize),
}

/// What one endpoint does and has seen.
#[derive(Default)]
pub struct Endpoint {
    behaviour: Mutex<Option<(Mode, Option<String>)>>,
    requests: AtomicUsize,
    answered: AtomicUsize,
}

impl Endpoint {
    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Successful (2xx) answers whose body was handed to the connection so far.
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    fn mode(&self) -> (Mode, Option<String>) {
        self.behaviour
            .lock()
            .ok()
            .and_then(|b| b.clone())
            .unwrap_or((Mode::Serve, None))
    }
}

struct Shared {
    issuer: String,
    jwks: Mutex<Value>,
    keys: Endpoint,
    metadata: Endpoint,
}

/// The running server (stopped on drop).
pub struct KeyServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl KeyServer {
    /// Serves `jwks` on a free port of 127.0.0.1.
    pub async fn start(jwks: Value) -> KeyServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            issuer: format!("http://{addr}"),
            jwks: Mutex::new(jwks),
            keys: Endpoint::default(),
            metadata: Endpoint::default(),
        });
        let app = Router::new()
            .route("/jwks", get(keys))
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        KeyServer { addr, shared, task }
    }

    /// `http://127.0.0.1:<port>`: the issuer of the tokens this server's keys sign.
    pub fn issuer(&self) -> &str {
        &self.shared.issuer
    }

    pub fn jwks_url(&self) -> String {
        format!("{}/jwks", self.shared.issuer)
    }

    /// Replaces the published key set.
    pub fn publish(&self, jwks: Value) {
        if let Ok(mut j) = self.shared.jwks.lock() {
            *j = jwks;
        }
    }

    /// How `/jwks` answers from now on, with an optional `Cache-Control` value.
    pub fn keys_mode(&self, mode: Mode, cache_control: Option<&str>) {
        set(&self.shared.keys, mode, cache_control);
    }

    /// How the RFC 8414 metadata answers from now on.
    pub fn metadata_mode(&self, mode: Mode) {
        set(&self.shared.metadata, mode, None);
    }

    pub fn keys(&self) -> &Endpoint {
        &self.shared.keys
    }

    pub fn metadata(&self) -> &Endpoint {
        &self.shared.metadata
    }
}

impl Drop for KeyServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn set(endpoint: &Endpoint, mode: Mode, cache_control: Option<&str>) {
    if let Ok(mut b) = endpoint.behaviour.lock() {
        *b = Some((mode, cache_control.map(str::to_owned)));
    }
}

async fn keys(State(shared): State<Arc<Shared>>) -> Response<Body> {
    let doc = shared.jwks.lock().map(|j| j.clone()).unwrap_or_default();
    answer(&shared.keys, doc).await
}

async fn metadata(State(shared): State<Arc<Shared>>) -> Response<Body> {
    let doc = json!({
        "issuer": shared.issuer,
        "jwks_uri": format!("{}/jwks", shared.issuer),
        "token_endpoint": format!("{}/token", shared.issuer),
        "response_types_supported": ["code"],
    });
    answer(&shared.metadata, doc).await
}

async fn answer(endpoint: &Endpoint, mut doc: Value) -> Response<Body> {
    endpoint.requests.fetch_add(1, Ordering::SeqCst);
    let (mode, cache_control) = endpoint.mode();
    let status = match mode {
        Mode::Serve => StatusCode::OK,
        Mode::Delay(d) => {
            tokio::time::sleep(d).await;
            StatusCode::OK
        }
        Mode::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            StatusCode::GATEWAY_TIMEOUT
        }
        Mode::Fail(code) => {
            doc = json!({});
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        }
        Mode::Oversized(bytes) => {
            doc["padding"] = Value::String("x".repeat(bytes));
            StatusCode::OK
        }
    };
    let mut resp = Response::new(Body::from(doc.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    if let Some(value) = cache_control.and_then(|v| header::HeaderValue::from_str(&v).ok()) {
        resp.headers_mut().insert(header::CACHE_CONTROL, value);
    }
    if status.is_success() {
        endpoint.answered.fetch_add(1, Ordering::SeqCst);
    }
    resp
}
