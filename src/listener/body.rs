//! The one reader of client request bodies (Streamable HTTP POST, 2024-11-05 `/messages`):
//! a size limit (`limits.max_body`, 413), a deadline with a minimum rate
//! (`limits.body_read_timeout`, `limits.min_body_rate`, 408), and the process-wide budget of
//! bytes held in memory by bodies (`limits.max_buffered_bodies`, 503 + `Retry-After`).
//!
//! A body whose length is announced (`Content-Length`) reserves all of it before its first
//! byte is read, so a client cannot make the gateway hold memory it would refuse later; one
//! without (chunked, HTTP/2 without the header) reserves as it grows. The reservation lives
//! in the [`Buffered`] the handler holds, and is given back when that is dropped.

use std::future::Future as _;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use hyper::body::Body as _;
use tokio::time::Instant;

use crate::config::{BodyLimits, Limits};
use crate::error::GatewayError;

/// How bodies are read, and the budget they share: one per process (the `Gateway`'s).
#[derive(Debug)]
pub struct BodyReader {
    max_body: usize,
    read_timeout: Duration,
    /// Bytes per second; 0: the deadline never extends.
    min_rate: u64,
    budget: Budget,
}

/// A request body read whole, holding its share of the budget until dropped.
#[derive(Debug)]
pub struct Buffered<'a> {
    bytes: Bytes,
    _reservation: Reservation<'a>,
}

impl Deref for Buffered<'_> {
    type Target = Bytes;
    fn deref(&self) -> &Bytes {
        &self.bytes
    }
}

impl BodyReader {
    pub fn new(limits: &Limits) -> BodyReader {
        let BodyLimits {
            read_timeout,
            min_rate,
            max_buffered,
        } = limits.bodies;
        BodyReader {
            max_body: limits.max_body_bytes,
            read_timeout,
            min_rate,
            budget: Budget {
                used: AtomicUsize::new(0),
                max: max_buffered,
            },
        }
    }

    /// Bytes of the budget held now (for the metrics).
    pub fn buffered(&self) -> usize {
        self.budget.used.load(Ordering::Relaxed)
    }

    /// Reads `body` whole under the limits: 413 when it is (or announces being) larger than
    /// `max_body`, 503 when the budget cannot hold it, 408 when it is too slow, 400 when the
    /// connection fails first.
    pub async fn read(&self, body: Body) -> Result<Buffered<'_>, GatewayError> {
        let limit = self.max_body;
        let hint = body.size_hint();
        if hint.lower() > limit as u64 {
            return Err(GatewayError::BodyTooLarge { limit });
        }
        let announced = hint.exact().map_or(0, |n| n as usize);
        let mut reservation = self.budget.reserve(announced)?;
        // The deadline runs from the first wait for bytes: a body that has arrived with its
        // head (most do) is read without a clock reading or a timer.
        let mut started: Option<Instant> = None;
        let mut sleep = std::pin::pin!(None::<tokio::time::Sleep>);
        let mut body = body;
        let mut collected = Collected::Empty;
        let mut received = 0usize;
        loop {
            // The next frame, or `None` once the deadline has passed.
            let frame = std::future::poll_fn(|cx| {
                if let Poll::Ready(frame) = std::pin::Pin::new(&mut body).poll_frame(cx) {
                    return Poll::Ready(Some(frame));
                }
                if sleep.is_none() {
                    let now = Instant::now();
                    started = Some(now);
                    sleep.set(Some(tokio::time::sleep_until(
                        now + self.allowance(received),
                    )));
                }
                match sleep.as_mut().as_pin_mut() {
                    Some(timer) => timer.poll(cx).map(|()| None),
                    None => Poll::Pending,
                }
            })
            .await;
            let Some(frame) = frame else {
                return Err(GatewayError::BodyTimeout);
            };
            let data = match frame {
                None => break,
                Some(Err(_)) => return Err(GatewayError::BodyUnreadable),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue, // trailers: nothing to keep
                },
            };
            received += data.len();
            if received > limit {
                return Err(GatewayError::BodyTooLarge { limit });
            }
            self.budget.grow(&mut reservation, received)?;
            collected.push(data, announced);
            if let (Some(started), Some(timer)) = (started, sleep.as_mut().as_pin_mut()) {
                let deadline = started + self.allowance(received);
                if deadline > timer.deadline() {
                    timer.reset(deadline);
                }
            }
        }
        Ok(Buffered {
            bytes: collected.into_bytes(),
            _reservation: reservation,
        })
    }

    /// How long a body may have taken once `received` bytes have arrived: the read timeout,
    /// or longer while the bytes came at `min_rate` on average.
    fn allowance(&self, received: usize) -> Duration {
        if self.min_rate == 0 {
            return self.read_timeout;
        }
        let at_rate = Duration::from_millis(
            u64::try_from(received as u128 * 1000 / u128::from(self.min_rate)).unwrap_or(u64::MAX),
        );
        self.read_timeout.max(at_rate)
    }
}

/// The bytes of one body so far: most bodies arrive in one frame, kept without a copy.
enum Collected {
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Collected {
    fn push(&mut self, data: Bytes, announced: usize) {
        *self = match std::mem::replace(self, Collected::Empty) {
            Collected::Empty => Collected::One(data),
            Collected::One(first) => {
                let mut all =
                    BytesMut::with_capacity(announced.max(2 * (first.len() + data.len())));
                all.extend_from_slice(&first);
                all.extend_from_slice(&data);
                Collected::Many(all)
            }
            Collected::Many(mut all) => {
                all.extend_from_slice(&data);
                Collected::Many(all)
            }
        };
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Collected::Empty => Bytes::new(),
            Collected::One(bytes) => bytes,
            Collected::Many(all) => all.freeze(),
        }
    }
}

/// Bytes held by bodies being read or handled, all clients together. Never waited on: a
/// body that does not fit is refused at once (waiting would hold the connection and its
/// buffers, which is what the budget is there to bound).
#[derive(Debug)]
struct Budget {
    used: AtomicUsize,
    max: usize,
}

/// A share of the [`Budget`], given back on drop.
#[derive(Debug)]
struct Reservation<'a> {
    budget: &'a Budget,
    bytes: usize,
}

impl Budget {
    fn reserve(&self, bytes: usize) -> Result<Reservation<'_>, GatewayError> {
        let mut reservation = Reservation {
            budget: self,
            bytes: 0,
        };
        self.grow(&mut reservation, bytes)?;
        Ok(reservation)
    }

    /// Grows `reservation` to `total` bytes (nothing to do when it holds that much already).
    fn grow(&self, reservation: &mut Reservation<'_>, total: usize) -> Result<(), GatewayError> {
        let more = total.saturating_sub(reservation.bytes);
        if more == 0 {
            return Ok(());
        }
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(more).filter(|&after| after <= self.max)
            })
            .map_err(|_| GatewayError::BodyBudgetExhausted)?;
        reservation.bytes = total;
        Ok(())
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests;
