//! HTTPS on the listener: MCP over TLS with HTTP/1.1 and HTTP/2 (ALPN), plain HTTP refused on
//! the TLS port, and certificate reload without restart (new handshakes get the new pair,
//! established connections and sessions carry on, a broken pair is ignored).

use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use reqwest::Version;
use serde_json::{Value, json};
use switchyard::config::{TlsConfig, UpstreamTransport};

use crate::support::TempDir;
use crate::support::client::{RawClient, into_reply};
use crate::support::config::{config, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;

/// A test certificate authority.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for localhost and 127.0.0.1: (cert PEM, key PEM).
    fn leaf(&self, cn: &str) -> (String, String) {
        let key = KeyPair::generate().expect("leaf key");
        let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".into()])
            .expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        (cert.pem(), key.serialize_pem())
    }

    /// A client trusting only this CA; HTTP/1.1 only, or HTTP/2 and HTTP/1.1 offered by ALPN.
    fn client(&self, http1_only: bool) -> reqwest::Client {
        switchyard::app::install_crypto_provider();
        let ca = reqwest::Certificate::from_pem(self.pem.as_bytes()).expect("CA PEM");
        let mut builder = reqwest::Client::builder()
            .tls_certs_only([ca])
            .timeout(Duration::from_secs(20));
        if http1_only {
            builder = builder.http1_only();
        }
        builder.build().expect("client")
    }
}

/// `echo` on the session, returning the HTTP version of the exchange and the text.
async fn echo(c: &RawClient, message: &str) -> (Version, String) {
    let id = c.next_id();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": message}}});
    let resp = c.post_open(&body).await;
    let version = resp.version();
    let reply = into_reply(resp).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let text = text_of(reply.last());
    (version, text)
}

fn text_of(reply: &Value) -> String {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result in {reply}"))
        .to_owned()
}

/// A session over HTTPS with `http` (initialize + initialized).
async fn session(gw: &TestGateway, http: reqwest::Client) -> RawClient {
    let mut c = RawClient::new(gw.https_url("t"));
    c.http = http;
    c.initialize().await;
    c
}

/// Whether a fresh connection with `client` completes a request.
async fn reachable(gw: &TestGateway, client: &reqwest::Client) -> bool {
    let url = format!("https://{}/healthz", gw.addr);
    client
        .get(url)
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
}

#[tokio::test]
async fn https_with_both_protocols_and_certificate_reload() {
    let dir = TempDir::new("tls");
    let cert_path = dir.path("cert.pem");
    let key_path = dir.path("key.pem");
    let ca1 = Ca::new("Switchyard Test CA 1");
    let ca2 = Ca::new("Switchyard Test CA 2");
    let (cert, key) = ca1.leaf("first");
    std::fs::write(&cert_path, cert).expect("write cert");
    std::fs::write(&key_path, key).expect("write key");

    let mut cfg = config(vec![tenant(
        "t",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )]);
    cfg.tls = Some(TlsConfig {
        cert: cert_path.clone(),
        key: key_path.clone(),
        reload_interval: Duration::from_millis(100),
    });
    let gw = TestGateway::start(cfg).await;
    assert!(gw.https_url("t").starts_with("https://127.0.0.1:"));

    // MCP over HTTPS, HTTP/1.1 and HTTP/2 (negotiated by ALPN).
    let h1 = session(&gw, ca1.client(true)).await;
    assert_eq!(
        echo(&h1, "over h1").await,
        (Version::HTTP_11, "over h1".into())
    );
    let h2 = session(&gw, ca1.client(false)).await;
    assert_eq!(
        echo(&h2, "over h2").await,
        (Version::HTTP_2, "over h2".into())
    );

    // Plain HTTP to the TLS port gets no HTTP answer; the listener carries on.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("plain client");
    let refused = plain
        .get(format!("http://{}/healthz", gw.addr))
        .send()
        .await;
    assert!(refused.is_err(), "plain HTTP answered: {refused:?}");
    assert!(reachable(&gw, &ca1.client(false)).await);

    // Replace the pair with one issued by the second CA; new handshakes get it once reloaded.
    let (cert, key) = ca2.leaf("second");
    std::fs::write(&key_path, key).expect("write key");
    std::fs::write(&cert_path, cert).expect("write cert");
    let start = Instant::now();
    while !reachable(&gw, &ca2.client(false)).await {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the new certificate was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!reachable(&gw, &ca1.client(false)).await);
    assert!(!reachable(&gw, &ca1.client(true)).await);

    // The HTTP/2 connection established under the old certificate is untouched, and the
    // sessions created before the reload work over new connections too.
    assert_eq!(
        echo(&h2, "same conn").await,
        (Version::HTTP_2, "same conn".into())
    );
    let mut moved = RawClient::new(gw.https_url("t"));
    moved.http = ca2.client(true);
    moved.session = h1.session.clone();
    assert_eq!(
        echo(&moved, "moved").await,
        (Version::HTTP_11, "moved".into())
    );
    let fresh = session(&gw, ca2.client(false)).await;
    assert_eq!(echo(&fresh, "fresh").await.1, "fresh");

    // A broken key file: logged and ignored; the last good certificate keeps being served.
    std::fs::write(
        &key_path,
        "-----BEGIN PRIVATE KEY-----\nbroken!\n-----END PRIVATE KEY-----\n",
    )
    .expect("write broken key");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(reachable(&gw, &ca2.client(false)).await);
    assert!(!reachable(&gw, &ca1.client(false)).await);
    let after = session(&gw, ca2.client(true)).await;
    assert_eq!(
        echo(&after, "still").await,
        (Version::HTTP_11, "still".into())
    );

    gw.stop().await;
}

/// The endpoint's own origin is the scheme it is reached by: over TLS, a browser page from
/// `https://<host>` is admitted and one from `http://<host>` (the same host, another origin)
/// is refused — the guard knows the request came over TLS.
#[tokio::test]
async fn over_tls_the_endpoints_own_origin_is_its_https_one() {
    let dir = TempDir::new("tls-origin");
    let ca = Ca::new("Switchyard Test CA");
    let (cert, key) = ca.leaf("origin");
    let (cert_path, key_path) = (dir.path("cert.pem"), dir.path("key.pem"));
    std::fs::write(&cert_path, cert).expect("write cert");
    std::fs::write(&key_path, key).expect("write key");
    let mut t = tenant(
        "t",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    );
    // An origin listed: loopback pages are no longer admitted as such.
    t.allowed_origins = vec!["https://app.example".into()];
    let mut cfg = config(vec![t]);
    cfg.tls = Some(TlsConfig {
        cert: cert_path,
        key: key_path,
        reload_interval: Duration::from_secs(60),
    });
    let gw = TestGateway::start(cfg).await;
    let client = ca.client(true);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "tls-origin", "version": "1"}}});
    for (origin, status) in [
        (format!("https://{}", gw.addr), 200),
        (format!("http://{}", gw.addr), 403),
    ] {
        let resp = client
            .post(gw.https_url("t"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("origin", &origin)
            .body(initialize.to_string())
            .send()
            .await
            .expect("request over TLS");
        assert_eq!(resp.status().as_u16(), status, "Origin {origin}");
    }
    gw.stop().await;
}
