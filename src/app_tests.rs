//! `serve` refusing to start: a connection cap the descriptor limit cannot serve, a TLS key
//! that cannot be read (the error names the figures or the file, and nothing is served).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::TlsConfig;
use crate::listener::tests::{Dir, leaf_and_ca};

#[tokio::test]
async fn app_serve_refuses_to_start_with_a_connection_cap_the_descriptors_cannot_serve() {
    let config = crate::config::parse(
        "limits: {max_connections: 16777216}\ntenants:\n  - name: a\n    upstreams:\n      - {name: u, http: {url: \"http://127.0.0.1:9/mcp\"}}\n",
        "test.yaml",
        &|_| None,
    )
    .unwrap();
    let gateway = super::build(&config).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let served = tokio::time::timeout(
        Duration::from_secs(5),
        super::serve(listener, gateway, None, std::future::pending()),
    )
    .await
    .expect("serve returns at once");
    let e = served.unwrap_err().to_string();
    assert!(
        e.starts_with("limits.max_connections is 16777216: with 288 file descriptors kept"),
        "{e}"
    );
    assert!(e.contains("(RLIMIT_NOFILE)"), "{e}");
}

#[tokio::test]
async fn app_serve_refuses_to_start_without_a_usable_certificate() {
    let config = crate::config::parse(
        "tenants:\n  - name: a\n    upstreams:\n      - {name: u, http: {url: \"http://127.0.0.1:9/mcp\"}}\n",
        "test.yaml",
        &|_| None,
    )
    .unwrap();
    let gateway = super::build(&config).await.unwrap();
    let dir = Dir::new("refuse");
    let (cert, _, _, _) = leaf_and_ca("refuse");
    let tls = TlsConfig {
        cert: dir.write("cert.pem", cert),
        key: dir.0.join("missing-key.pem"),
        reload_interval: Duration::from_secs(1),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let served = tokio::time::timeout(
        Duration::from_secs(5),
        super::serve(listener, gateway, Some(tls), std::future::pending()),
    )
    .await
    .expect("serve returns at once");
    let e = served.unwrap_err().to_string();
    assert!(e.starts_with("cannot read TLS key file "), "{e}");
    assert!(e.contains("missing-key.pem"), "{e}");
}
