//! A response body that keeps something alive until the body has been sent or dropped: a
//! request's concurrency slot, its place in the connection's in-flight count. A streamed answer
//! holds it to its last byte, not only until the handler returns.

use axum::body::{Body, Bytes, HttpBody};
use hyper::body::Frame;
use std::pin::Pin;
use std::task::{Context, Poll};

/// `body`, holding `held` until it ends.
pub fn hold<G: Send + Unpin + 'static>(body: Body, held: G) -> Body {
    Body::new(HoldUntilEnd {
        inner: body,
        _held: held,
    })
}

struct HoldUntilEnd<G> {
    inner: Body,
    _held: G,
}

impl<G: Unpin> HttpBody for HoldUntilEnd<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
