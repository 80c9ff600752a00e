//! The front door of the HTTP API: what every request passes before routing, outermost first:
//! its request id (`request_id`), CORS (answers preflight itself), the metrics
//! (`api::metrics::counted`) and per-key admission (`api::admission::admitted`).
//!
//! These run once per request, in front of the router, rather than as axum layers. A layer on a
//! `Router` wraps every route's service, and axum clones and boxes that whole stack per request
//! (about 24 heap allocations per inference for these four, measured with
//! `bench/request_instructions.py`). The metrics label requests by route template, which only
//! routing knows, so the front door keeps a table of the router's templates
//! ([`Routes::route`] fills both) and looks the path up itself.

use axum::extract::{DefaultBodyLimit, Request};
use axum::response::Response;
use axum::routing::future::RouteFuture;
use axum::routing::MethodRouter;
use axum::Router;
use futures_util::future::BoxFuture;
use infergate_service::state::AppState;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service, ServiceExt};
use tower_http::cors::{Cors, CorsLayer};

/// The label of a request no route matched (the dashboard's files, unknown paths).
const UNMATCHED: &str = "unmatched";

/// The router's route templates, to label a request by the route its path matches, and the
/// list of them in the order they were added.
#[derive(Default)]
struct Templates(matchit::Router<&'static str>, Vec<&'static str>);

impl Templates {
    fn insert(&mut self, template: &'static str) {
        // A conflict is a programming error, which `Router::route` reports by panicking at
        // start; this table uses the same matcher, so it only ever repeats that.
        if let Err(e) = self.0.insert(template, template) {
            panic!("route {template}: {e}");
        }
        self.1.push(template);
    }

    /// The template `path` matches, or [`UNMATCHED`].
    fn of(&self, path: &str) -> &'static str {
        self.0.at(path).map_or(UNMATCHED, |m| *m.value)
    }
}

/// The router under construction, and the table of its route templates.
#[derive(Default)]
pub struct Routes {
    router: Router<Arc<AppState>>,
    templates: Templates,
}

impl Routes {
    /// Adds a route, as `Router::route` does, and records its template for the metrics.
    pub fn route(mut self, path: &'static str, method_router: MethodRouter<Arc<AppState>>) -> Self {
        self.templates.insert(path);
        self.router = self.router.route(path, method_router);
        self
    }

    /// The templates of the routes added so far, in order.
    pub fn templates(&self) -> Vec<&'static str> {
        self.templates.1.clone()
    }

    /// What answers the requests no route matches.
    pub fn fallback<H, T>(mut self, handler: H) -> Self
    where
        H: axum::handler::Handler<T, Arc<AppState>>,
        T: 'static,
    {
        self.router = self.router.fallback(handler);
        self
    }

    /// The front door in front of these routes.
    pub fn finish(self, state: Arc<AppState>, cors: Option<CorsLayer>) -> Front {
        // Bodies are read by our own limited readers, which answer 413 with a JSON error, so
        // axum's default limit is off for every extractor.
        let router = self.router.with_state(state.clone());
        let routed = DefaultBodyLimit::disable().layer(router);
        let inner = Arc::new(Inner {
            state,
            templates: self.templates,
            // Both are reference-counted handles, so this clone per request allocates nothing.
            route: Box::new(move |request| routed.clone().call(request)),
        });
        let cors = cors.map(|layer| layer.layer(Admitted(inner.clone())));
        Front { inner, cors }
    }
}

/// Routes one request. A `Router` is always ready (its `poll_ready` returns at once), so it is
/// called without one; the service's type is axum's and unnamed, hence the closure.
type RouteFn = Box<dyn Fn(Request) -> RouteFuture<Infallible> + Send + Sync>;

struct Inner {
    state: Arc<AppState>,
    templates: Templates,
    route: RouteFn,
}

impl Inner {
    /// Metrics, admission and the route.
    async fn serve(&self, request: Request) -> Response {
        let template = self.templates.of(request.uri().path());
        let state = &self.state;
        super::metrics::counted(state, template, request, |request| {
            super::admission::admitted(state, request, |request| async move {
                let Ok(response) = (self.route)(request).await;
                response
            })
        })
        .await
    }
}

/// The HTTP API: its routes behind the front door.
pub struct Front {
    inner: Arc<Inner>,
    /// Present when CORS is configured. Outside metrics and admission, so refusals carry the
    /// CORS headers a browser needs to read them.
    cors: Option<Cors<Admitted>>,
}

impl Front {
    pub async fn serve(&self, request: Request) -> Response {
        let trusted_sampling = |request: &Request| {
            let presented = infergate_kserve::credentials::presented_key(request.headers());
            (self.inner.state.config().tracing.honour_caller_sampling).trusts(presented.is_some())
        };
        crate::request_id::identified(request, trusted_sampling, |request| async move {
            match &self.cors {
                // The layer's settings are cloned per request, only where CORS is configured.
                Some(cors) => {
                    let Ok(response) = cors.clone().oneshot(request).await;
                    response
                }
                None => self.inner.serve(request).await,
            }
        })
        .await
    }
}

/// The whole front door as a tower service: what a listener's connections call, and what
/// in-process tests drive with `tower::ServiceExt::oneshot`.
#[derive(Clone)]
pub struct FrontService(pub Arc<Front>);

impl Service<Request> for FrontService {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let front = self.0.clone();
        Box::pin(async move { Ok(front.serve(request).await) })
    }
}

/// Metrics, admission and the route as a tower service, for the CORS layer to wrap.
#[derive(Clone)]
pub struct Admitted(Arc<Inner>);

impl Service<Request> for Admitted {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move { Ok(inner.serve(request).await) })
    }
}

/// What one listener serves.
#[derive(Clone)]
pub enum Handler {
    /// The HTTP API behind its front door.
    Api(Arc<Front>),
    /// Routing only: the gRPC listener, whose service answers its own errors and counts its
    /// own metrics.
    Routes(Router),
}

impl crate::connection::Handle for Handler {
    async fn handle(self, request: Request) -> Response {
        match self {
            Handler::Api(front) => front.serve(request).await,
            Handler::Routes(router) => {
                let Ok(response) = router.oneshot(request).await;
                response
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_found_for_their_paths_and_others_are_unmatched() {
        let mut templates = Templates::default();
        for t in ["/v2/models/{model}/infer", "/v2/models/{model}", "/metrics"] {
            templates.insert(t);
        }
        let at = |path: &str| templates.of(path);
        assert_eq!(at("/v2/models/mlp/infer"), "/v2/models/{model}/infer");
        assert_eq!(at("/v2/models/mlp"), "/v2/models/{model}");
        assert_eq!(at("/metrics"), "/metrics");
        assert_eq!(at("/v2/models/mlp/infer/more"), UNMATCHED);
        assert_eq!(at("/index.html"), UNMATCHED);
    }
}
