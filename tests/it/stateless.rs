//! The stateless revision (2026-07-28) in front of session-based upstreams: the transport's
//! rules over raw HTTP, the official Python SDK 2.x (auto and pinned 2026-07-28) through the
//! gateway to the reference `server-everything`, and the elicitation/sampling bridge
//! (upstream questions become input_required results, answered by the client's retry, also
//! when the retry reaches another replica than the one holding the request).

use serde_json::{Value, json};

use crate::support::client::{ACCEPT_BOTH, RawClient, Reply};
use crate::support::config::{config, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::{Sdk, everything_stdio, run_client};
use switchyard::config::{StdioSharing, UpstreamTransport};

const V: &str = "2026-07-28";

async fn everything_gateway() -> TestGateway {
    // Per session: server-everything offers its sampling/elicitation tools to clients that
    // declared those capabilities, which the gateway does for its stateless clients.
    let mut stdio = everything_stdio();
    stdio.sharing = StdioSharing::PerSession;
    TestGateway::start(config(vec![tenant(
        "ev",
        vec![upstream("everything", UpstreamTransport::Stdio(stdio))],
    )]))
    .await
}

pub(crate) fn meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    })
}

/// POSTs a stateless request with the mirrored headers it should carry, plus `extra`
/// (which replace them by name).
pub(crate) async fn send(
    c: &RawClient,
    id: u64,
    method: &str,
    params: Value,
    extra: &[(&str, &str)],
) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let name = params["name"]
        .as_str()
        .or(params["uri"].as_str())
        .map(str::to_owned);
    let mut headers: Vec<(&str, String)> = vec![
        ("content-type", "application/json".into()),
        ("accept", ACCEPT_BOTH.into()),
        ("mcp-protocol-version", V.into()),
        ("mcp-method", method.into()),
    ];
    if let Some(n) = name {
        headers.push(("mcp-name", n));
    }
    for (k, v) in extra {
        headers.retain(|(h, _)| h != k);
        if !v.is_empty() {
            headers.push((k, (*v).to_owned()));
        }
    }
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    c.post_raw(body.to_string(), &h).await
}

fn assert_error(r: &Reply, status: u16, code: i64) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.error_code(), Some(code), "{:?}", r.last());
}

#[tokio::test]
async fn stateless_transport_rules() {
    let gw = everything_gateway().await;
    let c = RawClient::new(gw.url("ev"));
    let caps = json!({"elicitation": {}});

    // server/discover: versions, capabilities, identity, caching hints; no session minted.
    let r = send(
        &c,
        1,
        "server/discover",
        json!({"_meta": meta(caps.clone())}),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.header("mcp-session-id").is_none(), "{r:?}");
    let d = &r.last()["result"];
    assert_eq!(d["resultType"], "complete");
    assert_eq!(d["supportedVersions"][0], V, "{d}");
    assert!(d["capabilities"]["tools"].is_object(), "{d}");
    assert!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"].is_string(),
        "{d}"
    );
    assert!(
        d["ttlMs"].as_u64().is_some() && d["cacheScope"].is_string(),
        "{d}"
    );

    // Lists carry resultType and caching hints.
    let r = send(
        &c,
        2,
        "tools/list",
        json!({"_meta": meta(caps.clone())}),
        &[],
    )
    .await;
    let list = &r.last()["result"];
    assert_eq!(list["resultType"], "complete", "{list}");
    assert!(
        list["ttlMs"].is_u64() && list["cacheScope"] == "public",
        "{list}"
    );
    assert!(list["tools"].as_array().is_some_and(|t| !t.is_empty()));

    // A plain call: complete, with the upstream's content.
    let args = json!({"name": "echo", "arguments": {"message": "hi"}, "_meta": meta(caps.clone())});
    let r = send(&c, 3, "tools/call", args.clone(), &[]).await;
    assert_eq!(
        r.last()["result"]["resultType"],
        "complete",
        "{:?}",
        r.last()
    );
    assert_eq!(r.last()["result"]["content"][0]["text"], "Echo: hi");
    // Mcp-Name may come Base64-encoded.
    let r = send(
        &c,
        4,
        "tools/call",
        args.clone(),
        &[("mcp-name", "=?base64?ZWNobw==?=")],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");

    // Header/body mismatches and missing headers: 400 HeaderMismatch.
    assert_error(
        &send(
            &c,
            5,
            "tools/call",
            args.clone(),
            &[("mcp-name", "get-sum")],
        )
        .await,
        400,
        -32020,
    );
    assert_error(
        &send(&c, 6, "tools/call", args.clone(), &[("mcp-name", "")]).await,
        400,
        -32020,
    );
    assert_error(
        &send(
            &c,
            7,
            "tools/call",
            args.clone(),
            &[("mcp-method", "tools/list")],
        )
        .await,
        400,
        -32020,
    );
    assert_error(
        &send(&c, 8, "tools/call", args.clone(), &[("mcp-method", "")]).await,
        400,
        -32020,
    );
    let other_version = json!({"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2025-11-25",
        "io.modelcontextprotocol/clientCapabilities": {}}});
    assert_error(
        &send(&c, 9, "tools/list", other_version, &[]).await,
        400,
        -32020,
    );
    // Missing _meta fields: 400 Invalid params.
    assert_error(
        &send(&c, 10, "tools/list", json!({}), &[]).await,
        400,
        -32602,
    );
    let no_caps = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": V}});
    assert_error(&send(&c, 11, "tools/list", no_caps, &[]).await, 400, -32602);
    // An unknown version: 400 UnsupportedProtocolVersion with what is supported.
    let r = send(
        &c,
        12,
        "tools/list",
        json!({"_meta": meta(json!({}))}),
        &[("mcp-protocol-version", "1900-01-01")],
    )
    .await;
    assert_error(&r, 400, -32022);
    assert_eq!(
        r.last()["error"]["data"]["supported"][0],
        V,
        "{:?}",
        r.last()
    );
    // Methods this revision does not have, and unknown ones: 404 Method not found.
    for m in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "no/such",
    ] {
        assert_error(
            &send(&c, 13, m, json!({"_meta": meta(json!({}))}), &[]).await,
            404,
            -32601,
        );
    }
    // No GET stream and no session to delete.
    let r = c
        .get_raw(&[("accept", "text/event-stream"), ("mcp-protocol-version", V)])
        .await;
    assert_eq!(r.status, 405, "{r:?}");

    // An upstream's question for a capability the request did not declare: 400 -32021.
    let sample = json!({"name": "trigger-sampling-request", "arguments": {"prompt": "x"},
                        "_meta": meta(json!({"elicitation": {}}))});
    let r = send(&c, 14, "tools/call", sample, &[]).await;
    assert_error(&r, 400, -32021);
    assert!(r.last()["error"]["data"]["requiredCapabilities"]["sampling"].is_object());

    // Elicitation bridged: input_required, then the retry with the answer completes.
    let ask = json!({"name": "trigger-elicitation-request", "arguments": {},
                     "_meta": meta(json!({"elicitation": {}}))});
    let r = send(&c, 15, "tools/call", ask.clone(), &[]).await;
    let first = r.last()["result"].clone();
    assert_eq!(first["resultType"], "input_required", "{first}");
    let requests = first["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{first}");
    let (key, question) = requests.iter().next().expect("one input request");
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let state = first["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();

    // A tampered state, or one presented for another tool, is refused.
    let mut tampered = ask.clone();
    tampered["requestState"] = json!(format!("{state}x"));
    assert_error(
        &send(&c, 16, "tools/call", tampered, &[]).await,
        200,
        -32602,
    );
    let mut elsewhere =
        json!({"name": "echo", "arguments": {"message": "x"}, "_meta": meta(json!({}))});
    elsewhere["requestState"] = json!(state);
    assert_error(
        &send(&c, 17, "tools/call", elsewhere, &[]).await,
        200,
        -32602,
    );

    // A retry without the answer is asked again; with it, the tool completes.
    let mut retry = ask.clone();
    retry["requestState"] = json!(state);
    retry["inputResponses"] = json!({});
    let r = send(&c, 18, "tools/call", retry, &[]).await;
    let again = r.last()["result"].clone();
    assert_eq!(again["resultType"], "input_required", "{again}");
    assert!(again["inputRequests"][key].is_object(), "{again}");
    let mut retry = ask.clone();
    retry["requestState"] = again["requestState"].clone();
    retry["inputResponses"] = json!({ key.clone(): {"action": "accept", "content": {
        "name": "Ada", "color": "green", "email": "ada@example.com", "age": 36, "pets": ["cats"]}}});
    let r = send(&c, 19, "tools/call", retry, &[]).await;
    assert_eq!(r.last()["id"], 19, "{:?}", r.last());
    let done = &r.last()["result"];
    assert_eq!(done["resultType"], "complete", "{done}");
    assert!(done.to_string().contains("Ada"), "{done}");
    gw.stop().await;
}

/// The official Python SDK 2.x through the gateway: discovering the revision (`auto`) and
/// pinned to it, tools with progress, and sampling and elicitation answered through
/// input_required results that the gateway turns into the upstream's answers.
#[tokio::test]
async fn python_sdk_stateless_against_a_session_based_upstream() {
    let gw = everything_gateway().await;
    let url = gw.url("ev");
    for mode in ["auto", V] {
        let report = run_client(Sdk::Python, &url, "everything", &["--mode", mode]).await;
        assert_eq!(report["protocolVersion"], V, "{report}");
        crate::sdk_clients::assert_everything(&report, "python", "");
        let report = run_client(Sdk::Python, &url, "roundtrips", &["--mode", mode]).await;
        assert_eq!(report["protocolVersion"], V, "{report}");
        let sampling = report["sampling"].as_str().unwrap_or_default();
        assert!(sampling.contains("sampled by python"), "{mode}: {report}");
        let elicitation = report["elicitation"].as_str().unwrap_or_default();
        assert!(
            elicitation.contains("- Name: Ada python"),
            "{mode}: {report}"
        );
    }
    gw.stop().await;
}

/// Two replicas sharing a real Redis, no affinity: the elicitation is asked through replica A
/// (which holds the upstream request), every retry goes to replica B, which has A continue
/// the request over the bus and answers with what A sends back.
#[tokio::test]
async fn a_bridged_retry_reaching_another_replica_is_continued_by_the_holder() {
    let redis = crate::support::redis::RedisServer::start().await;
    let mut stdio = everything_stdio();
    stdio.sharing = StdioSharing::PerSession;
    let cfg = crate::cluster::clustered(
        &redis,
        "mrtr",
        vec![tenant(
            "ev",
            vec![upstream("everything", UpstreamTransport::Stdio(stdio))],
        )],
    );
    let gws = crate::cluster::replicas(&cfg, 2).await;
    let (a, b) = (
        RawClient::new(gws[0].url("ev")),
        RawClient::new(gws[1].url("ev")),
    );
    let ask = json!({"name": "trigger-elicitation-request", "arguments": {},
                     "_meta": meta(json!({"elicitation": {}}))});

    // The user's first requests reach both replicas at once: both open the same session (its
    // id is derived from the user under the shared key); one creates it, the other finds it.
    let list = json!({"_meta": meta(json!({}))});
    let (ra, rb) = tokio::join!(
        send(&a, 90, "tools/list", list.clone(), &[]),
        send(&b, 91, "tools/list", list, &[])
    );
    for r in [&ra, &rb] {
        assert!(r.last()["result"]["tools"].is_array(), "{:?}", r.last());
    }

    let r = send(&a, 1, "tools/call", ask.clone(), &[]).await;
    let first = r.last()["result"].clone();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(first["resultType"], "input_required", "{:?}", r.last());
    let key = first["inputRequests"]
        .as_object()
        .and_then(|q| q.keys().next().cloned())
        .expect("one input request");

    // Unanswered on B: asked again (the request stays parked on A).
    let mut retry = ask.clone();
    retry["requestState"] = first["requestState"].clone();
    retry["inputResponses"] = json!({});
    let r = send(&b, 2, "tools/call", retry, &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.last()["id"], 2, "{:?}", r.last());
    let again = r.last()["result"].clone();
    assert_eq!(again["resultType"], "input_required", "{:?}", r.last());
    assert!(again["inputRequests"][&key].is_object(), "{again}");

    // Answered on B: A completes the tool; B answers with the retry's id.
    let mut retry = ask.clone();
    retry["requestState"] = again["requestState"].clone();
    retry["inputResponses"] = json!({ key.clone(): {"action": "accept", "content": {
        "name": "Grace", "color": "blue", "email": "grace@example.com", "age": 41, "pets": ["dogs"]}}});
    let r = send(&b, 3, "tools/call", retry.clone(), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.last()["id"], 3, "{:?}", r.last());
    let done = &r.last()["result"];
    assert_eq!(done["resultType"], "complete", "{done}");
    assert!(done.to_string().contains("Grace"), "{done}");

    // The state is spent: presented again (on either replica), it is refused.
    for (c, id) in [(&b, 4), (&a, 5)] {
        let r = send(c, id, "tools/call", retry.clone(), &[]).await;
        assert_error(&r, 200, -32602);
        let message = r.last()["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("has ended"), "{message}");
    }

    // The holder is gone (its request with it): the retry on B is refused within seconds.
    let r = send(&a, 6, "tools/call", ask.clone(), &[]).await;
    let parked = r.last()["result"]["requestState"].clone();
    assert!(parked.is_string(), "{:?}", r.last());
    let mut gws = gws.into_iter();
    let (holder, other) = (gws.next().expect("A"), gws.next().expect("B"));
    holder.stop().await;
    let mut retry = ask.clone();
    retry["requestState"] = parked;
    retry["inputResponses"] = json!({});
    let started = std::time::Instant::now();
    let r = send(&b, 7, "tools/call", retry, &[]).await;
    assert_error(&r, 200, -32602);
    let message = r.last()["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not answer"), "{message}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    other.stop().await;
}
