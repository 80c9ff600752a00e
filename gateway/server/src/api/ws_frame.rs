//! Answers as WebSocket text frames (the stream route, the events route, chat generation over
//! WebSocket).

use axum::extract::ws::{Message, Utf8Bytes};
use infergate_service::error::{ApiError, ApiResult};
use serde::Serialize;

/// A typed answer as a frame.
pub(super) fn encoded(answer: &impl Serialize) -> ApiResult<Message> {
    let text = serde_json::to_string(answer)
        .map_err(|e| ApiError::internal(format!("encoding the answer: {e}")))?;
    Ok(Message::Text(Utf8Bytes::from(text)))
}

/// A frame of plain data (strings, numbers, options), which always serializes: [`encoded`]
/// without a failure to handle (were one to happen, the frame would be empty).
pub(super) fn frame(answer: &impl Serialize) -> Message {
    encoded(answer).unwrap_or_else(|_| Message::Text(Utf8Bytes::default()))
}
