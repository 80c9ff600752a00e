//! A response body that keeps something alive until the body has been sent or dropped: a
//! request's concurrency slot, its place in the connection's in-flight count, the policies
//! that wait for its answer to be sent. A streamed answer holds it to its last byte, not only
//! until the handler returns.

use axum::body::{Body, Bytes, HttpBody};
use axum::response::Response;
use hyper::body::Frame;
use infergate_service::phases::{Outcome, Passage};
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

/// `response`, whose request's policies hear that its answer was sent once the body's last
/// byte has gone out (or that it was dropped, when the body is dropped before its end).
pub fn until_sent(response: Response, passage: Passage) -> Response {
    if passage.is_empty() {
        return response;
    }
    let (parts, body) = response.into_parts();
    let body = Body::new(SentWhenEnded {
        inner: body,
        passage: Some(passage),
    });
    Response::from_parts(parts, body)
}

struct SentWhenEnded {
    inner: Body,
    passage: Option<Passage>,
}

impl HttpBody for SentWhenEnded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        // hyper stops polling a body that says it has ended, so the last frame handed over
        // (not a final `None`) is when the answer is sent.
        let ended = match &frame {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(_))) => this.inner.is_end_stream(),
            _ => false,
        };
        if ended {
            if let Some(passage) = this.passage.take() {
                passage.finish(Outcome::Sent);
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
