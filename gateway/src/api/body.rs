//! Reading request bodies under a size cap and a deadline: a declared Content-Length over the
//! cap is refused before reading, a streamed body is cut off as soon as it passes the cap, and a
//! body that arrives too slowly (see [`ReadDeadline`]) is answered 408.

use crate::error::{ApiError, ApiResult, Kind};
use axum::body::Body;
use bytes::Bytes;
use futures_util::StreamExt;
use http::HeaderMap;
use hyper::body::Frame;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error a [`ReadDeadline`] body ends with when its client sends too slowly.
#[derive(Debug)]
pub struct BodyTimeout {
    received: u64,
}

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body arrived too slowly (stalled, or below the minimum rate) after {} bytes",
            self.received
        )
    }
}

impl std::error::Error for BodyTimeout {}

/// A request body with a read deadline, so that a client trickling its body cannot hold a
/// connection and a request slot for long (Kestrel's minimum data rate, nginx's
/// `client_body_timeout`). Once the handler starts reading, the body fails with
/// [`BodyTimeout`] when no byte arrives for `gap`, or when, after the first `gap`, fewer than
/// `min_rate` bytes per second have arrived on average: its deadline is
/// `min(last byte + gap, start + gap + received / min_rate)`.
pub struct ReadDeadline<B> {
    inner: B,
    gap: Duration,
    min_rate: u64,
    started: Option<Instant>,
    last_data: Instant,
    received: u64,
    timer: Option<Pin<Box<Sleep>>>,
    timed_out: bool,
}

impl<B> ReadDeadline<B> {
    pub fn new(inner: B, gap: Duration, min_rate: u64) -> ReadDeadline<B> {
        ReadDeadline {
            inner,
            gap,
            min_rate,
            started: None,
            last_data: Instant::now(),
            received: 0,
            timer: None,
            timed_out: false,
        }
    }

    fn deadline(&self, started: Instant) -> Instant {
        let stalled = self.last_data + self.gap;
        if self.min_rate == 0 {
            return stalled;
        }
        let earned = Duration::from_secs_f64(self.received as f64 / self.min_rate as f64);
        stalled.min(started + self.gap + earned)
    }
}

impl<B> hyper::body::Body for ReadDeadline<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.timed_out {
            return Poll::Ready(None);
        }
        let started = *this.started.get_or_insert_with(|| {
            let now = Instant::now();
            // The clock starts when the handler reads, not while the request waits for it.
            this.last_data = now;
            now
        });
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if !data.is_empty() {
                        this.received += data.len() as u64;
                        this.last_data = Instant::now();
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let deadline = this.deadline(started);
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                if timer.as_mut().poll(cx).is_ready() {
                    this.timed_out = true;
                    return Poll::Ready(Some(Err(Box::new(BodyTimeout {
                        received: this.received,
                    }))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.timed_out || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// 408 when reading failed because the client sent too slowly, else 400.
fn read_error(e: axum::Error) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(error) = source {
        if let Some(timeout) = error.downcast_ref::<BodyTimeout>() {
            return ApiError::new(Kind::ClientTimeout, timeout.to_string());
        }
        source = error.source();
    }
    ApiError::bad_request(format!("reading request body: {e}"))
}

fn too_large(limit: usize) -> ApiError {
    ApiError::too_large(format!("request body exceeds the {limit}-byte limit"))
}

/// Refuses early when Content-Length already says the body is too large.
pub fn check_declared_length(headers: &HeaderMap, limit: usize) -> ApiResult<()> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit as u64 => Err(too_large(limit)),
        _ => Ok(()),
    }
}

/// Reads a whole body of at most `limit` bytes.
pub async fn read_limited(headers: &HeaderMap, body: Body, limit: usize) -> ApiResult<Vec<u8>> {
    check_declared_length(headers, limit)?;
    let mut out = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(read_error)?;
        if out.len() + chunk.len() > limit {
            return Err(too_large(limit));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Calls `sink` with each chunk of a body of at most `limit` bytes.
pub async fn stream_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    mut sink: impl FnMut(&[u8]) -> ApiResult<()>,
) -> ApiResult<u64> {
    check_declared_length(headers, limit)?;
    let mut total = 0u64;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(read_error)?;
        total += chunk.len() as u64;
        if total > limit as u64 {
            return Err(too_large(limit));
        }
        sink(&chunk)?;
    }
    Ok(total)
}

/// The largest JSON body of a management call (keys, limits, repository index): these are a
/// few hundred bytes in practice.
pub const MAX_JSON_API_BYTES: usize = 1 << 20;
