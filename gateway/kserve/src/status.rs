//! The gateway's errors as gRPC statuses: an error's kind (whose fault it is, `infergate_service::error`)
//! picks the code here, as it picks the HTTP status there, so both transports report a fault
//! the same way.

use infergate_service::error::{ApiError, Kind};
use tonic::{Code, Status};

/// The one place that decides the gRPC code.
pub fn code(kind: Kind) -> Code {
    match kind {
        Kind::Invalid | Kind::Unprocessable => Code::InvalidArgument,
        Kind::Unauthenticated => Code::Unauthenticated,
        Kind::Forbidden => Code::PermissionDenied,
        Kind::NotFound => Code::NotFound,
        Kind::Conflict => Code::FailedPrecondition,
        // gRPC reports an oversized message as RESOURCE_EXHAUSTED too.
        Kind::TooLarge | Kind::UriTooLong | Kind::HeadersTooLarge | Kind::RateLimited => {
            Code::ResourceExhausted
        }
        Kind::ClientTimeout | Kind::Timeout => Code::DeadlineExceeded,
        // gRPC's own mapping of HTTP 502/503: UNAVAILABLE, worth a retry.
        Kind::Overloaded | Kind::Upstream => Code::Unavailable,
        Kind::Unsupported => Code::Unimplemented,
        Kind::Model | Kind::Internal => Code::Internal,
    }
}

/// The status for an error, with `retry-after` (seconds) in its metadata when the error has
/// one (429, 503). Faults on the server's side are logged here with their causes, which the
/// status leaves out.
pub fn status(error: ApiError) -> Status {
    error.log("grpc");
    let mut status = Status::new(code(error.kind), error.message);
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
    fn every_kind_has_the_code_of_its_http_status() {
        let cases = [
            (Kind::Invalid, Code::InvalidArgument),
            (Kind::Unauthenticated, Code::Unauthenticated),
            (Kind::Forbidden, Code::PermissionDenied),
            (Kind::NotFound, Code::NotFound),
            (Kind::TooLarge, Code::ResourceExhausted),
            (Kind::Unprocessable, Code::InvalidArgument),
            (Kind::RateLimited, Code::ResourceExhausted),
            (Kind::Model, Code::Internal),
            (Kind::Overloaded, Code::Unavailable),
            (Kind::Timeout, Code::DeadlineExceeded),
        ];
        for (kind, grpc) in cases {
            assert_eq!(code(kind), grpc, "{kind:?}");
        }
        let limited = status(ApiError::new(Kind::RateLimited, "slow down").retry_after(3));
        assert_eq!(limited.message(), "slow down");
        assert_eq!(limited.metadata().get("retry-after").unwrap(), "3");
    }
}
