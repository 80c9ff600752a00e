//! Where a request comes from: the connection's peer, put in each request's extensions by the
//! listener ([`PeerAddr`]), or the client a trusted proxy names (`[auth] trusted_proxies`, see
//! `infergate_service::anonymous`). Anonymous access and loopback-only features (shared
//! memory) decide on it; a header alone never does.

use http::{Extensions, HeaderMap};
use infergate_service::state::AppState;
use std::net::{IpAddr, SocketAddr};
use tonic::metadata::MetadataMap;

/// The peer of the connection a request arrived on.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

const FORWARDED_FOR: &str = "x-forwarded-for";

/// The client of an HTTP request; `None` when it did not come through a listener (an
/// in-process test that set no peer).
pub fn of(state: &AppState, extensions: &Extensions, headers: &HeaderMap) -> Option<IpAddr> {
    let peer = extensions.get::<PeerAddr>()?.0.ip();
    let forwarded: Vec<&str> = headers
        .get_all(FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    Some(state.client_address(peer, &forwarded))
}

/// The client of a gRPC call (tonic keeps the HTTP request's extensions).
pub fn of_grpc(
    state: &AppState,
    extensions: &Extensions,
    metadata: &MetadataMap,
) -> Option<IpAddr> {
    let peer = extensions.get::<PeerAddr>()?.0.ip();
    let forwarded: Vec<&str> = metadata
        .get_all(FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    Some(state.client_address(peer, &forwarded))
}

/// The client of an HTTP request, as a handler's extractor (`None` when unknown).
pub struct Client(pub Option<IpAddr>);

impl axum::extract::FromRequestParts<std::sync::Arc<AppState>> for Client {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        state: &std::sync::Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        Ok(Client(of(state, &parts.extensions, &parts.headers)))
    }
}
