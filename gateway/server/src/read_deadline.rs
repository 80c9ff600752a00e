//! The read deadline the listener puts on every request body (`connection::ConnService`), and the
//! error a body that arrives too slowly ends with (`api::body` answers it 408).

use bytes::Bytes;
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
