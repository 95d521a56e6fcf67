//! What the limit tests check alike: the refusals a client sees (429 before a session,
//! `-32029` inside one), the refusal counter, and the scripts Redis has run.

use super::client::Reply;

/// A 429 naming `limit`, with `Retry-After` equal to `data.retryAfterSeconds` and within
/// `1..=max_wait`; returns the wait.
pub fn assert_refused_before_session(r: &Reply, limit: &str, max_wait: u64) -> u64 {
    assert_eq!(r.status, 429, "{r:?}");
    let header: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("429 without a numeric Retry-After: {r:?}"));
    let error = &r.last()["error"];
    assert_eq!(error["code"], -32029, "{r:?}");
    assert_eq!(error["data"]["limit"], limit, "{r:?}");
    assert_eq!(error["data"]["retryAfterSeconds"], header, "{r:?}");
    assert!((1..=max_wait).contains(&header), "Retry-After {header}");
    header
}

/// A JSON-RPC `-32029` answered with HTTP 200 inside the session, naming `limit`; returns
/// `retryAfterSeconds`.
pub fn assert_refused_in_session(r: &Reply, limit: &str) -> u64 {
    assert_eq!(r.status, 200, "{r:?}");
    let error = &r.last()["error"];
    assert_eq!(error["code"], -32029, "{r:?}");
    assert_eq!(error["data"]["limit"], limit, "{r:?}");
    let wait = error["data"]["retryAfterSeconds"]
        .as_u64()
        .unwrap_or_else(|| panic!("no retryAfterSeconds: {r:?}"));
    assert!(wait >= 1, "{r:?}");
    wait
}

/// `switchyard_limit_refusals_total{tenant, limit}` in this process.
pub fn refusals(tenant: &str, limit: &str) -> u64 {
    switchyard::metrics::get()
        .limit_refusals
        .with_label_values(&[tenant, limit])
        .get()
}

/// Scripts Redis has run (`EVALSHA` and `EVAL`), from `INFO commandstats`.
pub async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
