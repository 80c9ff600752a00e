//! The stack infergate's request path is built on (tokio, hyper 1's HTTP/1.1 server,
//! tokio-rustls with ring) and nothing else: each request's body is read and a canned answer
//! sent back. `bench/http_floor.py` measures its CPU per request next to HAProxy's and
//! infergate's, which splits infergate's cost into the stack's and its own.
//!
//! Usage: floor_server PORT CERT_PEM KEY_PEM INDEX [BUSY_US]
//! INDEX: one answer a line, `path<TAB>file<TAB>content-type<TAB>header-length or ->`; the
//! answer's file is sent as the body, the header length as `Inference-Header-Content-Length`.
//! BUSY_US: before answering a path that ends in `/infer`, the worker spins that long on the
//! request's own thread, a stand-in for a model run where infergate makes a lone request's run
//! (one core busy, the other idle); `bench/latency_floor.py` measures the latency this stack
//! adds around such a run. `GET /count` answers the requests served so far (itself not
//! counted). Prints `listening` once it accepts connections.

use anyhow::Context as _;
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[path = "support/spin.rs"]
mod spin;
use spin::spin_for;

struct Answer {
    body: Bytes,
    content_type: HeaderValue,
    header_len: Option<HeaderValue>,
}

struct Answers {
    by_path: HashMap<String, Answer>,
    served: AtomicU64,
    /// How long an inference keeps its worker busy before the answer.
    busy: Duration,
}

fn load(index: &str) -> anyhow::Result<HashMap<String, Answer>> {
    let mut by_path = HashMap::new();
    let text = std::fs::read_to_string(index).with_context(|| format!("reading {index}"))?;
    for line in text.lines().filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split('\t').collect();
        let [path, file, content_type, header_len] = fields[..] else {
            anyhow::bail!("{index}: expected 4 tab-separated fields in {line:?}");
        };
        let body = std::fs::read(file).with_context(|| format!("reading {file}"))?;
        by_path.insert(
            path.to_owned(),
            Answer {
                body: Bytes::from(body),
                content_type: HeaderValue::from_str(content_type)?,
                header_len: (header_len != "-")
                    .then(|| HeaderValue::from_str(header_len))
                    .transpose()?,
            },
        );
    }
    Ok(by_path)
}

async fn answer(
    answers: Arc<Answers>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    // Read the body whole, as a server that decodes it must.
    let _ = request.into_body().collect().await;
    if path == "/count" {
        let served = answers.served.load(Ordering::Relaxed).to_string();
        return Ok(Response::new(Full::new(Bytes::from(served))));
    }
    answers.served.fetch_add(1, Ordering::Relaxed);
    if path.ends_with("/infer") && !answers.busy.is_zero() {
        spin_for(answers.busy);
    }
    let Some(found) = answers.by_path.get(&path) else {
        let mut response = Response::new(Full::new(Bytes::from_static(
            br#"{"error": "no canned answer for this path"}"#,
        )));
        *response.status_mut() = StatusCode::NOT_FOUND;
        return Ok(response);
    };
    let mut response = Response::new(Full::new(found.body.clone()));
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, found.content_type.clone());
    if let Some(len) = &found.header_len {
        headers.insert("inference-header-content-length", len.clone());
    }
    Ok(response)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (port, cert, key, index, busy_us) = match &args[..] {
        [_, port, cert, key, index] => (port, cert, key, index, 0),
        [_, port, cert, key, index, busy] => (port, cert, key, index, busy.parse()?),
        _ => anyhow::bail!("usage: floor_server PORT CERT_PEM KEY_PEM INDEX [BUSY_US]"),
    };
    let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let answers = Arc::new(Answers {
        by_path: load(index)?,
        served: AtomicU64::new(0),
        busy: Duration::from_micros(busy_us),
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.parse::<u16>()?)).await?;
    eprintln!("listening");
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let (acceptor, answers) = (acceptor.clone(), answers.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service =
                hyper::service::service_fn(move |request| answer(answers.clone(), request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
        });
    }
}
