//! One suite for every `SessionStore`: the in-memory default and Redis (a real `redis-server`
//! started by the test) must behave the same — keys scoped by tenant and user, sliding TTL,
//! update only of existing records, delete, the owner index, readiness.

#![allow(clippy::unwrap_used)] // a failing store operation is the test failure itself

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use switchyard::cluster::{Redis, RedisSessionStore};
use switchyard::config::{RedisConfig, Secret};
use switchyard::session::memory::MemorySessionStore;
use switchyard::session::{
    ClientTransport, SessionBackend, SessionId, SessionKey, SessionRecord, SessionStore,
    StoreError, UpstreamSessionRecord,
};

use crate::support::redis::RedisServer;

fn key(tenant: &str, user: &str, id: &SessionId) -> SessionKey {
    SessionKey {
        tenant: tenant.into(),
        user: user.into(),
        id: id.clone(),
    }
}

fn record() -> SessionRecord {
    let mut upstream_sessions = BTreeMap::new();
    upstream_sessions.insert(
        "remote".to_owned(),
        UpstreamSessionRecord {
            id: "up-123".into(),
            protocol_version: "2025-06-18".into(),
            capabilities: json!({"tools": {"listChanged": true}}),
            server_info: json!({"name": "remote", "version": "1"}),
            instructions: Some("be nice".into()),
        },
    );
    SessionRecord {
        budget: None,
        log_level: None,
        protocol_version: "2025-11-25".into(),
        client_capabilities: json!({"sampling": {}, "roots": {"listChanged": true}}),
        client_info: json!({"name": "suite", "version": "0"}),
        initialized: false,
        upstream_sessions,
        // Not empty: the contract covers the field that is left out for most sessions.
        subscriptions: BTreeMap::from([(
            "files".to_owned(),
            ["file:///a".to_owned(), "file:///b".to_owned()].into(),
        )]),
        created_at_ms: 1_700_000_000_000,
        // Not the default: the contract covers the field that is left out for most sessions.
        transport: ClientTransport::LegacySse,
    }
}

pub async fn redis_config(server: &RedisServer, prefix: &str) -> RedisConfig {
    RedisConfig {
        target: switchyard::config::RedisTarget::Single(Secret::new(server.url())),
        prefix: prefix.into(),
        timeout: Duration::from_millis(500),
        events: switchyard::config::EventDurability::Durable,
    }
}

async fn redis_store(server: &RedisServer) -> SessionBackend {
    let redis = Redis::connect(&redis_config(server, "suite").await)
        .await
        .expect("connect to the test redis");
    redis.migrate().await.expect("migrate");
    SessionBackend::Redis(RedisSessionStore::new(redis))
}

/// The whole contract, against one backend.
pub(crate) async fn contract(store: &SessionBackend, label: &str) {
    let ttl = Duration::from_secs(600);
    let id = SessionId::generate();
    let mine = key("acme", "alice", &id);
    let rec = record();

    store
        .ping()
        .await
        .unwrap_or_else(|e| panic!("{label}: ping: {e}"));
    assert_eq!(
        store.load(&mine, ttl).await.unwrap(),
        None,
        "{label}: unknown"
    );

    store.create(&mine, &rec, ttl).await.unwrap();
    assert_eq!(
        store.load(&mine, ttl).await.unwrap().as_ref(),
        Some(&rec),
        "{label}: a record comes back exactly as stored"
    );
    // A second creation under the id is refused and replaces nothing.
    let mut other = rec.clone();
    other.initialized = !rec.initialized;
    assert!(
        matches!(
            store.create(&mine, &other, ttl).await,
            Err(StoreError::Exists)
        ),
        "{label}: create over an existing record"
    );
    assert_eq!(
        store.load(&mine, ttl).await.unwrap().as_ref(),
        Some(&rec),
        "{label}: the first record stays"
    );

    // The same id under another user or tenant finds nothing; the owner index knows.
    for other in [key("acme", "mallory", &id), key("other", "alice", &id)] {
        assert_eq!(
            store.load(&other, ttl).await.unwrap(),
            None,
            "{label}: {other:?}"
        );
        assert!(
            !store.touch(&other, ttl).await.unwrap(),
            "{label}: touch {other:?}"
        );
        assert!(
            !store.update(&other, &rec, ttl).await.unwrap(),
            "{label}: update {other:?}"
        );
        assert!(
            !store.delete(&other).await.unwrap(),
            "{label}: delete {other:?}"
        );
    }
    assert_eq!(
        store.owner_of(&id).await.unwrap(),
        Some(("acme".into(), "alice".into())),
        "{label}: owner"
    );

    // Update replaces; touch restarts the TTL of an existing record only.
    let mut changed = rec.clone();
    changed.initialized = true;
    changed.upstream_sessions.clear();
    assert!(store.update(&mine, &changed, ttl).await.unwrap(), "{label}");
    assert_eq!(
        store.load(&mine, ttl).await.unwrap(),
        Some(changed),
        "{label}"
    );
    assert!(store.touch(&mine, ttl).await.unwrap(), "{label}");

    // Update of a record that does not exist stores nothing.
    let ghost = key("acme", "alice", &SessionId::generate());
    assert!(!store.update(&ghost, &rec, ttl).await.unwrap(), "{label}");
    assert_eq!(store.load(&ghost, ttl).await.unwrap(), None, "{label}");

    // Delete: once true, then false; gone for every operation and from the owner index.
    assert!(store.delete(&mine).await.unwrap(), "{label}");
    assert!(!store.delete(&mine).await.unwrap(), "{label}");
    assert_eq!(store.load(&mine, ttl).await.unwrap(), None, "{label}");
    assert!(!store.touch(&mine, ttl).await.unwrap(), "{label}");
    assert_eq!(store.owner_of(&id).await.unwrap(), None, "{label}");

    // Sliding TTL: each load restarts it; without one, the record expires.
    let short = Duration::from_secs(2);
    let sliding = key("acme", "alice", &SessionId::generate());
    store.create(&sliding, &rec, short).await.unwrap();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(
            store.load(&sliding, short).await.unwrap().is_some(),
            "{label}: the TTL slides on every load (3.6s > 2s in all)"
        );
    }
    tokio::time::sleep(Duration::from_millis(2600)).await;
    assert_eq!(
        store.load(&sliding, short).await.unwrap(),
        None,
        "{label}: expired"
    );
    assert!(
        !store.touch(&sliding, short).await.unwrap(),
        "{label}: expired"
    );
}

#[tokio::test]
async fn memory_store_meets_the_contract() {
    contract(&SessionBackend::Memory(MemorySessionStore::new()), "memory").await;
}

#[tokio::test]
async fn redis_store_meets_the_contract() {
    let server = RedisServer::start().await;
    contract(&redis_store(&server).await, "redis").await;
}

#[tokio::test]
async fn redis_store_reports_unavailable_then_recovers_without_losing_records() {
    let mut server = RedisServer::start().await;
    let store = redis_store(&server).await;
    let ttl = Duration::from_secs(600);
    let k = key("acme", "alice", &SessionId::generate());
    store.create(&k, &record(), ttl).await.unwrap();

    server.kill().await;
    let started = std::time::Instant::now();
    match store.load(&k, ttl).await {
        Err(StoreError::Unavailable(reason)) => {
            assert!(!reason.contains("redis://"), "no URL in errors: {reason}");
        }
        other => panic!("expected Unavailable with Redis down, got {other:?}"),
    }
    assert!(store.ping().await.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a dead Redis is reported within the operation timeout, not after a hang"
    );

    server.restart().await;
    // The connection manager reconnects by itself; bounded wait.
    let mut back = false;
    for _ in 0..50 {
        if store.ping().await.is_ok() {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        back,
        "the store did not recover within 5s of Redis restarting"
    );
    assert_eq!(
        store.load(&k, ttl).await.unwrap(),
        Some(record()),
        "the record survived the crash (append-only file, fsync always)"
    );
}

#[tokio::test]
async fn redis_record_written_by_someone_else_is_reported_corrupt_not_a_panic() {
    let server = RedisServer::start().await;
    let store = redis_store(&server).await;
    let k = key("acme", "alice", &SessionId::generate());
    let mut conn = server.conn().await;
    let raw = format!("suite:v1:sess:{{acme:alice:{}}}", k.id.as_str());
    let _: () = redis::cmd("SET")
        .arg(&raw)
        .arg("{not json")
        .query_async(&mut conn)
        .await
        .unwrap();
    match store.load(&k, Duration::from_secs(60)).await {
        Err(StoreError::Corrupt(_)) => {}
        other => panic!("expected Corrupt, got {other:?}"),
    }
}
