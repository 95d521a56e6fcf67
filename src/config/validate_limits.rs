//! Validation of the connection and request-body keys of `limits:` (defaults in `limits.rs`).
//! Cross-host checks (a `max_connections` above what `RLIMIT_NOFILE` allows) are not here:
//! the file descriptor limit belongs to the host that runs the config, see `listener::fds`.

use std::time::Duration;

use super::raw::{Dur, Field, RawLimits, Size};
use super::units::{format_duration, format_size};
use super::validate::Checker;
use super::{BodyLimits, ConnectionLimits, DRAIN_DEADLINE};

/// hyper's smallest HTTP/1.1 read buffer (`max_buf_size` panics below it); the request head
/// must fit in that buffer, so this is also the smallest `max_header_bytes`.
const MIN_HEADER_BYTES: u64 = 8 << 10;
/// HTTP/2 carries SETTINGS_MAX_HEADER_LIST_SIZE in 32 bits; far above any sane header block.
const MAX_HEADER_BYTES: u64 = 16 << 20;
/// Upper bounds that catch typos (an extra digit) rather than encode policy.
const MAX_CONNECTIONS: u64 = 1 << 24;
const MAX_HEADERS: u64 = 10_000;
const MAX_STREAMS: u64 = 10_000;

/// `body_read_timeout`, `min_body_rate`, `max_buffered_bodies`; `max_body` is the validated
/// `max_body` (`None` when it was invalid, reported already).
pub(super) fn bodies(
    checker: &mut Checker<'_>,
    raw: Option<&RawLimits>,
    max_body: Option<usize>,
) -> Option<BodyLimits> {
    let defaults = BodyLimits::default();
    let none = None;
    let read_timeout = checker.duration(
        raw.map_or(&none, |r| &r.body_read_timeout),
        defaults.read_timeout,
        Duration::from_millis(1),
        "body_read_timeout",
    );
    let min_rate = sized(
        checker,
        raw.map_or(&None, |r| &r.min_body_rate),
        (defaults.min_rate, 0, u64::MAX),
        "min_body_rate",
    );
    let max_buffered_field = raw.map_or(&None, |r| &r.max_buffered_bodies);
    let max_buffered = sized(
        checker,
        max_buffered_field,
        (defaults.max_buffered as u64, 1 << 10, u64::MAX),
        "max_buffered_bodies",
    )
    .and_then(|v| to_usize(checker, max_buffered_field, v, "max_buffered_bodies"));
    // A budget smaller than one body would refuse every body of the largest allowed size.
    if let (Some(budget), Some(body)) = (max_buffered, max_body)
        && budget < body
    {
        let message = format!(
            "`max_buffered_bodies` ({}) must be at least `max_body` ({}): a body of the largest allowed size could never be read",
            format_size(budget as u64),
            format_size(body as u64)
        );
        // The defaults fit each other, so one of the two was written.
        let at = match (max_buffered_field, raw.and_then(|r| r.max_body.as_ref())) {
            (Some(sp), _) => Some((&sp.loc, message)),
            (None, Some(sp)) => {
                Some((&sp.loc, format!("{message}; set `max_buffered_bodies` too")))
            }
            (None, None) => None,
        };
        if let Some((loc, message)) = at {
            checker.error(loc, message);
            return None;
        }
    }
    Some(BodyLimits {
        read_timeout: read_timeout?,
        min_rate: min_rate?,
        max_buffered: max_buffered?,
    })
}

/// The connection keys: timeouts, caps, header bounds, HTTP/2 settings.
pub(super) fn connections(
    checker: &mut Checker<'_>,
    raw: Option<&RawLimits>,
) -> Option<ConnectionLimits> {
    let d = ConnectionLimits::default();
    let none = None;
    let mut duration = |field: Option<&Field<Dur>>, default: Duration, name: &str| {
        checker.duration(
            field.unwrap_or(&none),
            default,
            Duration::from_millis(1),
            name,
        )
    };
    let header_read_timeout = duration(
        raw.map(|r| &r.header_read_timeout),
        d.header_read_timeout,
        "header_read_timeout",
    );
    let idle_timeout = duration(raw.map(|r| &r.idle_timeout), d.idle_timeout, "idle_timeout");
    let keep_alive = duration(
        raw.map(|r| &r.http2_keep_alive_interval),
        d.http2_keep_alive_interval,
        "http2_keep_alive_interval",
    );
    let drain_grace = drain_grace(
        checker,
        raw.map_or(&None, |r| &r.drain_grace),
        d.drain_grace,
    );
    let max_connections = match raw.and_then(|r| r.max_connections.as_ref()) {
        None => Some(None),
        Some(_) => count(
            checker,
            raw.map_or(&None, |r| &r.max_connections),
            (0, 1, MAX_CONNECTIONS),
            "max_connections",
        )
        .map(Some),
    };
    let per_client = count(
        checker,
        raw.map_or(&None, |r| &r.max_connections_per_client),
        (d.max_connections_per_client as u64, 1, MAX_CONNECTIONS),
        "max_connections_per_client",
    );
    let header_bytes = sized(
        checker,
        raw.map_or(&None, |r| &r.max_header_bytes),
        (
            d.max_header_bytes as u64,
            MIN_HEADER_BYTES,
            MAX_HEADER_BYTES,
        ),
        "max_header_bytes",
    );
    let max_headers = count(
        checker,
        raw.map_or(&None, |r| &r.max_headers),
        (d.max_headers as u64, 1, MAX_HEADERS),
        "max_headers",
    );
    let streams = count(
        checker,
        raw.map_or(&None, |r| &r.http2_max_concurrent_streams),
        (u64::from(d.http2_max_concurrent_streams), 1, MAX_STREAMS),
        "http2_max_concurrent_streams",
    );
    Some(ConnectionLimits {
        header_read_timeout: header_read_timeout?,
        idle_timeout: idle_timeout?,
        max_connections: max_connections?,
        max_connections_per_client: per_client?,
        // Both bounded above by constants far below usize::MAX and u32::MAX.
        max_header_bytes: header_bytes? as usize,
        max_headers: max_headers?,
        http2_max_concurrent_streams: u32::try_from(streams?).ok()?,
        http2_keep_alive_interval: keep_alive?,
        drain_grace: drain_grace?,
    })
}

/// `drain_grace`: from 0 to the drain deadline it lies within.
fn drain_grace(
    checker: &mut Checker<'_>,
    field: &Field<Dur>,
    default: Duration,
) -> Option<Duration> {
    let value = checker.duration(field, default, Duration::ZERO, "drain_grace")?;
    if value > DRAIN_DEADLINE
        && let Some(sp) = field
    {
        checker.error(
            &sp.loc,
            format!(
                "`drain_grace` must be at most {} (the drain deadline), got {}",
                format_duration(DRAIN_DEADLINE),
                format_duration(value)
            ),
        );
        return None;
    }
    Some(value)
}

/// A size field: its default when absent; `None` when invalid or outside `min..=max`.
fn sized(
    checker: &mut Checker<'_>,
    field: &Field<Size>,
    (default, min, max): (u64, u64, u64),
    name: &str,
) -> Option<u64> {
    let Some(sp) = field else {
        return Some(default);
    };
    let Size(bytes) = *sp.get()?;
    if bytes < min {
        checker.error(
            &sp.loc,
            format!(
                "`{name}` must be at least {}, got {}",
                format_size(min),
                format_size(bytes)
            ),
        );
        return None;
    }
    if bytes > max {
        checker.error(
            &sp.loc,
            format!(
                "`{name}` must be at most {}, got {}",
                format_size(max),
                format_size(bytes)
            ),
        );
        return None;
    }
    Some(bytes)
}

/// A count field: its default when absent; `None` when invalid or outside `min..=max`.
pub(super) fn count(
    checker: &mut Checker<'_>,
    field: &Field<u64>,
    (default, min, max): (u64, u64, u64),
    name: &str,
) -> Option<usize> {
    let value = match field {
        None => default,
        Some(sp) => {
            let n = *sp.get()?;
            if !(min..=max).contains(&n) {
                checker.error(
                    &sp.loc,
                    format!("`{name}` must be from {min} to {max}, got {n}"),
                );
                return None;
            }
            n
        }
    };
    usize::try_from(value).ok()
}

fn to_usize(
    checker: &mut Checker<'_>,
    field: &Field<Size>,
    value: u64,
    name: &str,
) -> Option<usize> {
    let fits = usize::try_from(value).ok();
    if fits.is_none()
        && let Some(sp) = field
    {
        checker.error(&sp.loc, format!("`{name}` is too large for this platform"));
    }
    fits
}
