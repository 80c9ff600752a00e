//! A handle on a request's body that outlives the handler, so that a request refused before
//! its body was read can still be drained (bounded) and its client read the answer. Hyper
//! closes a connection whose request body was left unread; a client still uploading then sees
//! a reset instead of the 401 or 429 that explains it.

use super::body::{declared_length, declared_over};
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use futures_util::StreamExt;
use hyper::body::Frame;
use parking_lot::Mutex;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// How much of an unread body is drained before an early error answer, and for how long.
/// HTTP/1.1 clients that are still sending when the server answers and closes see a reset
/// (Python's `ssl.SSLEOFError`) instead of the error; draining a bounded amount lets them read
/// the JSON error and keeps the connection reusable. Bigger or slower bodies are cut off.
const DRAIN_MAX_BYTES: usize = 8 << 20;
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

/// Reads and discards up to [`DRAIN_MAX_BYTES`] of `body`, for at most [`DRAIN_DEADLINE`];
/// nothing when the `declared` length is already over that.
async fn drain(declared: Option<u64>, body: Body) {
    if declared_over(declared, DRAIN_MAX_BYTES) {
        return;
    }
    let drain = async {
        let mut seen = 0usize;
        let mut stream = body.into_data_stream();
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len();
            if seen > DRAIN_MAX_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_DEADLINE, drain).await;
}

type Slot = Arc<Mutex<Option<Body>>>;

/// The middleware's side of a request body handed to a handler.
pub struct Unread {
    slot: Slot,
    /// The request's Content-Length (only that of its headers is needed, so they are not kept).
    declared: Option<u64>,
}

impl Unread {
    /// Gives `request` a body that shares its source with the returned handle. Requests
    /// without a body are left as they are (None).
    pub fn keep(request: Request) -> (Request, Option<Unread>) {
        if request.body().is_end_stream() {
            return (request, None);
        }
        let (parts, body) = request.into_parts();
        let slot: Slot = Arc::new(Mutex::new(Some(body)));
        let unread = Unread {
            slot: slot.clone(),
            declared: declared_length(&parts.headers),
        };
        let request = Request::from_parts(parts, Body::new(Shared(slot)));
        (request, Some(unread))
    }

    /// Drains what the handler left of the body (see [`drain`]).
    pub async fn drain(self) {
        let body = self.slot.lock().take();
        if let Some(body) = body {
            drain(self.declared, body).await;
        }
    }
}

/// The handler's side: reads through the shared slot. The lock is never contended: the
/// middleware takes the body only after the handler has answered.
struct Shared(Slot);

impl HttpBody for Shared {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        match self.0.lock().as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.lock().as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.0
            .lock()
            .as_ref()
            .map_or_else(|| hyper::body::SizeHint::with_exact(0), |b| b.size_hint())
    }
}
