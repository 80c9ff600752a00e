//! The gateway's errors as gRPC statuses: the HTTP status an error carries (decided in one
//! place, `crate::error`) picks the code, so both transports report a fault the same way.

use crate::error::ApiError;
use http::StatusCode;
use tonic::{Code, Status};

pub fn code(status: StatusCode) -> Code {
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => Code::InvalidArgument,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::NOT_FOUND => Code::NotFound,
        StatusCode::CONFLICT => Code::FailedPrecondition,
        // gRPC reports an oversized message as RESOURCE_EXHAUSTED too.
        StatusCode::TOO_MANY_REQUESTS | StatusCode::PAYLOAD_TOO_LARGE => Code::ResourceExhausted,
        StatusCode::SERVICE_UNAVAILABLE => Code::Unavailable,
        StatusCode::GATEWAY_TIMEOUT => Code::DeadlineExceeded,
        StatusCode::NOT_IMPLEMENTED => Code::Unimplemented,
        s if s.is_client_error() => Code::InvalidArgument,
        _ => Code::Internal,
    }
}

/// The status for an error, with `retry-after` (seconds) in its metadata when the error has
/// one (429, 503).
pub fn status(error: ApiError) -> Status {
    let mut status = Status::new(code(error.status), error.message);
    if let Some(secs) = error.retry_after {
        status.metadata_mut().insert("retry-after", secs.into());
    }
    status
}

/// tonic refuses a request message over `max_decoding_message_size` (checked on its length
/// prefix, before reading it) with OUT_OF_RANGE; gRPC's own implementations and clients expect
/// RESOURCE_EXHAUSTED for an oversized message (as this gateway answers 413 over HTTP).
/// Applied to every gRPC response: only that refusal (the status tonic leaves in the
/// response's extensions, with its decoder's message) is rewritten.
pub async fn oversized_as_resource_exhausted(
    mut response: axum::response::Response,
) -> axum::response::Response {
    if response
        .extensions()
        .get::<Status>()
        .is_some_and(is_oversized)
    {
        response.headers_mut().insert(
            "grpc-status",
            http::HeaderValue::from(Code::ResourceExhausted as i32),
        );
    }
    response
}

/// A request message of a stream that could not be read, as the stream's final status: an
/// oversized one as RESOURCE_EXHAUSTED (the status of the stream's response is already sent
/// when tonic refuses a later message, so the middleware above cannot rewrite it), anything
/// else unchanged.
pub fn read_failure(status: Status) -> Status {
    if is_oversized(&status) {
        Status::resource_exhausted(status.message())
    } else {
        status
    }
}

/// Whether `status` is tonic's refusal of a message over `max_decoding_message_size`.
fn is_oversized(status: &Status) -> bool {
    status.code() == Code::OutOfRange && status.message().starts_with(TONIC_TOO_LARGE)
}

/// How tonic's decoder starts the message of that refusal.
const TONIC_TOO_LARGE: &str = "Error, decoded message length too large";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_the_gateway_answers_has_its_code() {
        let cases = [
            (400, Code::InvalidArgument),
            (401, Code::Unauthenticated),
            (403, Code::PermissionDenied),
            (404, Code::NotFound),
            (413, Code::ResourceExhausted),
            (422, Code::InvalidArgument),
            (429, Code::ResourceExhausted),
            (500, Code::Internal),
            (503, Code::Unavailable),
            (504, Code::DeadlineExceeded),
        ];
        for (http, grpc) in cases {
            assert_eq!(code(StatusCode::from_u16(http).unwrap()), grpc, "{http}");
        }
        let limited = status(ApiError {
            retry_after: Some(3),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "slow down")
        });
        assert_eq!(limited.message(), "slow down");
        assert_eq!(limited.metadata().get("retry-after").unwrap(), "3");
    }
}
