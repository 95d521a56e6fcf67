#![allow(clippy::unwrap_used)]
use super::*;

fn log(max_events: usize) -> StreamLog {
    StreamLog::new(
        StreamId::from("abcd1234-1"),
        StreamKind::Post,
        LogLimits {
            max_events,
            max_bytes: 1 << 20,
        },
    )
}

fn progress(n: u64) -> Bytes {
    Bytes::from(format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":1,\"progress\":{n}}}}}"
    ))
}

fn note(n: u64) -> Bytes {
    Bytes::from(format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{{\"data\":{n}}}}}"
    ))
}

/// Everything a reader gets from `after` on, as text.
fn read_all(l: &StreamLog, mut after: u64) -> Vec<String> {
    let mut out = Vec::new();
    while l.read_after(&mut after, &mut out) == Read::Some {}
    out.iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect()
}

#[test]
fn events_are_framed_with_their_id_and_read_after_a_position() {
    let l = log(10);
    assert!(l.append(b"{\"a\":1}", false));
    assert!(l.append(b"{\n\"b\":2}", true));
    assert!(!l.append(b"{}", false), "nothing after the last event");
    let mut out = Vec::new();
    let mut at = 0;
    assert_eq!(l.read_after(&mut at, &mut out), Read::Some);
    assert_eq!(at, 2);
    assert_eq!(&out[0][..], b"id: abcd1234-1.1\ndata: {\"a\":1}\n\n");
    assert_eq!(&out[1][..], b"id: abcd1234-1.2\ndata: { \"b\":2}\n\n");
    let mut out = Vec::new();
    let mut at = 1;
    assert_eq!(l.read_after(&mut at, &mut out), Read::Some);
    assert_eq!(out.len(), 1);
    assert_eq!(l.read_after(&mut at, &mut out), Read::Done);
}

#[test]
fn a_reader_behind_the_window_continues_with_the_oldest_event_kept() {
    let l = log(3);
    for i in 0..5 {
        // A reader keeps up, so the backlog bound never applies; the window still slides.
        l.append(format!("{{\"n\":{i}}}").as_bytes(), false);
        let mut at = i;
        l.read_after(&mut at, &mut Vec::new());
    }
    let mut out = Vec::new();
    let mut at = 0;
    assert_eq!(l.read_after(&mut at, &mut out), Read::Some);
    assert_eq!(out.len(), 3, "events 3, 4 and 5");
    assert_eq!(at, 5);
    assert!(String::from_utf8_lossy(&out[0]).starts_with("id: abcd1234-1.3\n"));
    assert_eq!(l.read_after(&mut at, &mut out), Read::Nothing);
    assert!(l.has_issued(5) && !l.has_issued(6));
}

#[test]
fn legacy_events_are_named_message_without_ids() {
    let l = StreamLog::legacy(StreamId::from("abcd1234-l"));
    assert!(l.append(b"{\"a\":\n1}", false));
    let mut out = Vec::new();
    assert_eq!(l.read_after(&mut 0, &mut out), Read::Some);
    assert_eq!(&out[0][..], b"event: message\ndata: {\"a\": 1}\n\n");
}

#[test]
fn priming_event_has_empty_data_and_retry() {
    let l = log(3);
    assert_eq!(l.prime(Duration::from_millis(1500)), Some(1));
    let mut out = Vec::new();
    l.read_after(&mut 0, &mut out);
    assert_eq!(&out[0][..], b"id: abcd1234-1.1\nretry: 1500\ndata: \n\n");
}

/// The unread backlog bound of a window of `max_events`.
fn bound(max_events: usize) -> u64 {
    log(max_events).limits.backlog().0 as u64
}

#[test]
fn an_unread_backlog_drops_notifications_and_keeps_the_latest_progress_and_the_response() {
    // A window of 64 events: at 60 unread, notifications stop being recorded.
    let l = log(64);
    let b = bound(64);
    assert_eq!(b, 60);
    for n in 1..b {
        assert!(l.record(&note(n), MessageKind::Notification, 0));
    }
    assert!(l.record(&progress(1), MessageKind::Progress, 0));
    for n in 2..=1000 {
        assert!(l.record(&progress(n), MessageKind::Progress, 0));
        assert!(l.record(&note(n + 100), MessageKind::Notification, 0));
    }
    assert!(l.record(
        &Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":\"sy-1\",\"method\":\"roots/list\"}"),
        MessageKind::Request,
        0
    ));
    assert!(l.append(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}", true));
    let got = read_all(&l, 0);
    let data: Vec<&str> = got
        .iter()
        .map(|e| e.split_once("data: ").unwrap().1.trim_end())
        .collect();
    let notes = (b - 1) as usize;
    assert_eq!(data.len(), notes + 4, "{data:#?}");
    assert!(
        data[..notes]
            .iter()
            .all(|d| d.contains("notifications/message"))
    );
    assert!(data[notes].contains("\"progress\":1}"), "{}", data[notes]);
    assert!(
        data[notes + 1].contains("\"progress\":1000}"),
        "the latest progress, held back, goes before the request: {}",
        data[notes + 1]
    );
    assert!(data[notes + 2].contains("roots/list"));
    assert!(data[notes + 3].contains("\"id\":7"), "the response is last");
    // 999 notifications dropped, 998 progress notifications coalesced away.
    assert_eq!(l.dropped(), 999 + 998);
    let ids: Vec<u64> = got
        .iter()
        .map(|e| {
            e[4..]
                .split_once('\n')
                .unwrap()
                .0
                .rsplit_once('.')
                .unwrap()
                .1
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(ids, (1..=b + 3).collect::<Vec<_>>(), "ids stay contiguous");
}

#[test]
fn a_reader_that_catches_up_gets_the_held_progress_and_new_notifications_again() {
    let l = log(8);
    let b = bound(8);
    for n in 1..=b {
        l.record(&note(n), MessageKind::Notification, 0);
    }
    // The bound is reached: progress is held back, notifications dropped.
    l.record(&progress(1), MessageKind::Progress, 0);
    l.record(&progress(2), MessageKind::Progress, 0);
    l.record(&note(100), MessageKind::Notification, 0);
    let mut at = 0;
    let mut out = Vec::new();
    assert_eq!(l.read_after(&mut at, &mut out), Read::Some);
    assert_eq!(out.len() as u64, b, "the notifications recorded");
    // The backlog is gone: the held progress is recorded for the next read.
    let mut out = Vec::new();
    assert_eq!(l.read_after(&mut at, &mut out), Read::Some);
    assert_eq!(out.len(), 1);
    assert!(String::from_utf8_lossy(&out[0]).contains("\"progress\":2}"));
    assert!(l.record(&note(101), MessageKind::Notification, 0));
    let mut out = Vec::new();
    assert_eq!(l.read_after(&mut at, &mut out), Read::Some);
    assert!(String::from_utf8_lossy(&out[0]).contains("\"data\":101"));
    assert_eq!(l.dropped(), 2, "note 100 and progress 1");
}

#[test]
fn progress_of_different_requests_is_held_apart() {
    let l = log(8);
    for n in 1..=bound(8) {
        l.record(&note(n), MessageKind::Notification, 0);
    }
    l.record(&progress(1), MessageKind::Progress, 0);
    l.record(&progress(2), MessageKind::Progress, 1);
    l.record(&progress(3), MessageKind::Progress, 0);
    l.append(b"{\"id\":1}", true);
    let got = read_all(&l, 0);
    let progress: Vec<&String> = got.iter().filter(|e| e.contains("progress")).collect();
    assert_eq!(progress.len(), 2, "{got:#?}");
    assert!(progress[0].contains("\"progress\":3}"));
    assert!(progress[1].contains("\"progress\":2}"));
    assert!(got.last().unwrap().contains("{\"id\":1}"));
}

#[test]
fn a_stream_that_ended_takes_nothing() {
    let l = log(10);
    l.finish();
    assert!(!l.record(&note(1), MessageKind::Notification, 0));
    assert!(!l.append(b"{}", true));
    assert_eq!(l.read_after(&mut 0, &mut Vec::new()), Read::Done);
}

#[test]
fn a_frame_is_one_data_line_whatever_line_breaks_the_message_has() {
    let id = EventId::new(StreamId::from("s-1"), 70_007);
    let framed = frame(
        &id,
        b"{\r\n\"a\":\r1,\n\"b\":\"x\"}\n",
        Some(Duration::ZERO),
    );
    assert_eq!(
        &framed[..],
        b"id: s-1.70007\nretry: 0\ndata: {  \"a\": 1, \"b\":\"x\"} \n\n"
    );
    assert_eq!(
        &frame(&id, b"{}", None)[..],
        format!("id: {id}\ndata: {{}}\n\n").as_bytes()
    );
}
