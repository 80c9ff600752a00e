//! Resource exhaustion from outside, as a hostile client would try it, against the real binary
//! with short limits from a config file: silent connections (plain TCP and after the TLS
//! handshake, on the HTTPS and the gRPC listener) are closed and cannot starve the connection
//! cap; the per-address cap of unauthenticated connections holds until a key is shown; slow
//! request bodies get 408; WebSocket ping floods are closed with memory bounded (on `/v2/events` too), pings do not
//! extend the first-message deadline, an oversized frame gets 1009; over-long URIs and header
//! sections get a JSON 414/431, an over-limit HTTP/2 body a 413. During each attack a normal
//! client keeps being served (bounds are generous; nothing here measures time).

use crate::harness::{model, Options, Server};
use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};

/// Far beyond every deadline configured below: reaching it means the server held on.
const GENEROUS: Duration = Duration::from_secs(30);

/// A server with `limits` (TOML) and the small classifier `cls`.
pub fn server_with(config: &str) -> (tempfile::TempDir, Server) {
    let tmp = tempfile::tempdir().unwrap();
    crate::harness::register(tmp.path(), "cls", &model("ocr-cls.onnx"));
    let path = tmp.path().join("infergate.toml");
    std::fs::write(&path, config).unwrap();
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: vec!["--config".into(), path.display().to_string()],
            ..Options::default()
        },
    );
    (tmp, s)
}

pub fn hostport(url: &str) -> String {
    url.trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string()
}

fn grpc_hostport(s: &Server) -> String {
    hostport(&crate::grpc::grpc_url(s))
}

pub fn tls_connector(s: &Server, alpn: &[u8]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(s.data.join("tls/cert.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

pub type Tls = tokio_rustls::client::TlsStream<TcpStream>;

pub async fn tls_connect(
    connector: &tokio_rustls::TlsConnector,
    addr: &str,
) -> std::io::Result<Tls> {
    let tcp = TcpStream::connect(addr).await?;
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// Reads until the server closes (EOF or an error); false if it is still open after `within`.
pub async fn closed_by_server(mut io: impl AsyncRead + Unpin, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let read_all = async {
        loop {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    tokio::time::timeout(within, read_all).await.is_ok()
}

/// A client that is not attacking: a fresh connection, a request, a whole answer.
async fn served(s: &Server) {
    let client = crate::harness::client_for(&s.data, false);
    let r = tokio::time::timeout(GENEROUS, client.get(s.url("/v2/health/live")).send())
        .await
        .expect("a normal client is served during the attack")
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// A client of the server's TLS, speaking only HTTP/2 or only HTTP/1.1.
fn client(s: &Server, http2: bool) -> reqwest::Client {
    let builder = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(s.data.join("tls/cert.pem")).unwrap())
                .unwrap(),
        );
    let builder = if http2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    };
    builder.build().unwrap()
}

/// `ServerLive` on the gRPC listener from a fresh connection.
async fn grpc_served(s: &Server, grpc: &str) {
    let client = client(s, true);
    let call = client
        .post(format!(
            "https://{grpc}/inference.GRPCInferenceService/ServerLive"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(vec![0u8; 5])
        .send();
    let r = tokio::time::timeout(GENEROUS, call)
        .await
        .expect("a gRPC client is served during the attack")
        .unwrap();
    assert_eq!(r.status(), 200);
    // One message: `live: true`.
    assert_eq!(r.bytes().await.unwrap().as_ref(), [0, 0, 0, 0, 2, 8, 1]);
}

/// 100 silent sockets per listener against a cap of 64: a third plain TCP, the rest silent
/// after the TLS handshake (HTTP/1.1 and h2 by ALPN). Without per-phase deadlines the first 64
/// are held forever and everyone else waits in the accept queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_on_both_listeners_and_starve_no_one() {
    let (_tmp, s) = server_with(
        "[limits]\nmax_connections = 64\nmax_unauthenticated_connections_per_ip = 0\n\
         handshake_timeout_s = 1\nheader_timeout_s = 1\n",
    );
    let grpc = grpc_hostport(&s);
    for addr in [hostport(&s.addr), grpc.clone()] {
        let mut silent = tokio::task::JoinSet::new();
        for i in 0..100 {
            let addr = addr.clone();
            let connector = tls_connector(&s, if i % 2 == 0 { b"h2" } else { b"http/1.1" });
            silent.spawn(async move {
                let connected = async {
                    if i % 3 == 0 {
                        let tcp = TcpStream::connect(&addr).await?;
                        return Ok(closed_by_server(tcp, GENEROUS).await);
                    }
                    // The handshake itself may wait in the accept queue behind the others.
                    Ok::<_, std::io::Error>(match tls_connect(&connector, &addr).await {
                        Ok(tls) => closed_by_server(tls, GENEROUS).await,
                        Err(_) => true,
                    })
                };
                match tokio::time::timeout(GENEROUS * 2, connected).await {
                    Ok(Ok(closed)) => closed,
                    Ok(Err(_)) => true,
                    Err(_) => false,
                }
            });
        }
        // Let the silent ones take the cap first.
        tokio::time::sleep(Duration::from_millis(500)).await;
        served(&s).await;
        grpc_served(&s, &grpc).await;
        let mut held = 0;
        while let Some(closed) = silent.join_next().await {
            held += usize::from(!closed.unwrap());
        }
        assert_eq!(
            held, 0,
            "silent connections on {addr} the server never closed"
        );
    }
    served(&s).await;
}

/// HTTP/1.1 over TLS by hand: sends `request`, reads one answer with a Content-Length body;
/// returns its status and its head and body as text (the head in lower case).
pub async fn http1_exchange(tls: &mut Tls, request: &str) -> (u16, String) {
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(GENEROUS, tls.read(&mut chunk))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed before answering");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + length {
                let status = head[9..12].parse().unwrap();
                return (status, format!("{head}\r\n\r\n{}", &text[end + 4..]));
            }
        }
    }
}

/// Connections that never show a key are capped per address; showing one frees the place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_connections_are_capped_per_address_until_a_key_is_shown() {
    let (_tmp, s) = server_with(
        "[limits]\nmax_unauthenticated_connections_per_ip = 8\nheader_timeout_s = 60\n",
    );
    let key = s.key("infer");
    let addr = hostport(&s.addr);
    let connector = tls_connector(&s, b"http/1.1");
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(
            tls_connect(&connector, &addr)
                .await
                .expect("within the cap"),
        );
    }
    // A keyless request does not free its connection's place either.
    let (status, _) = http1_exchange(
        &mut held[0],
        "GET /api/whoami HTTP/1.1\r\nhost: localhost\r\n\r\n",
    )
    .await;
    assert_eq!(status, 401);
    let refused = tokio::time::timeout(GENEROUS, tls_connect(&connector, &addr))
        .await
        .expect("refused at once, not held");
    assert!(refused.is_err(), "a ninth unauthenticated connection");
    let (status, body) = http1_exchange(
        &mut held[1],
        &format!("GET /api/whoami HTTP/1.1\r\nhost: localhost\r\nx-api-key: {key}\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let mut next = tls_connect(&connector, &addr)
        .await
        .expect("a key shown on one connection frees its place");
    let (status, _) = http1_exchange(
        &mut next,
        "GET /v2/health/live HTTP/1.1\r\nhost: localhost\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
}

/// A body that arrives one byte every 100 ms: 408 with a JSON error over HTTP/1.1 and HTTP/2,
/// while other clients are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_or_stalled_body_gets_408() {
    let (_tmp, s) = server_with("[limits]\nbody_timeout_s = 1\nbody_min_rate_bytes_per_s = 100\n");
    let key = s.key("infer");
    for (http2, stall) in [(false, false), (true, false), (false, true)] {
        let client = client(&s, http2);
        // Trickled: a byte each 100 ms (10 B/s, under the 100 B/s minimum); stalled: 64 bytes,
        // then nothing.
        let body = futures_util::stream::unfold(0u64, move |sent| async move {
            if stall && sent >= 64 {
                std::future::pending::<()>().await;
            }
            if !stall {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Some((Ok::<_, std::io::Error>(vec![b' ']), sent + 1))
        });
        let slow = client
            .post(s.url("/v2/models/cls/infer"))
            .header("x-api-key", &key)
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(body))
            .send();
        let (answer, ()) = tokio::join!(tokio::time::timeout(GENEROUS, slow), served(&s));
        let r = answer
            .unwrap_or_else(|_| panic!("no answer to a slow body (http2 {http2}, stall {stall})"))
            .unwrap();
        assert_eq!(r.status(), 408, "http2 {http2}, stall {stall}");
        let error: Value = r.json().await.unwrap();
        assert!(
            error["error"].as_str().unwrap().contains("too slowly"),
            "{error}"
        );
    }
}

type Ws = tokio_tungstenite::WebSocketStream<Tls>;

async fn ws_connect(s: &Server, key: Option<&str>) -> Ws {
    ws_connect_to(s, "/v2/stream", key).await
}

async fn ws_connect_to(s: &Server, path: &str, key: Option<&str>) -> Ws {
    let addr = hostport(&s.addr);
    let tls = tls_connect(&tls_connector(s, b"http/1.1"), &addr)
        .await
        .unwrap();
    let mut request =
        tungstenite::client::IntoClientRequest::into_client_request(format!("wss://{addr}{path}"))
            .unwrap();
    if let Some(key) = key {
        request
            .headers_mut()
            .insert("x-api-key", key.parse().unwrap());
    }
    tokio_tungstenite::client_async(request, tls)
        .await
        .unwrap()
        .0
}

/// The close code the server ends with (None: the connection ended without one).
async fn server_close(
    ws: &mut (impl futures_util::Stream<Item = Result<Message, tungstenite::Error>> + Unpin),
) -> Option<u16> {
    loop {
        match tokio::time::timeout(GENEROUS, ws.next())
            .await
            .expect("the server closes the WebSocket")
        {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

/// The server's resident memory in KiB.
fn rss_kib(s: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

const PINGS: usize = 200_000;

/// Sends up to [`PINGS`] pings as fast as possible without reading the pongs, checking that
/// a normal client is served meanwhile; answers how many were sent before the connection
/// failed and the server's close code (None: the connection ended without one, as it may
/// when the server closes with pings still unread).
async fn ping_flood(s: &Server, ws: Ws) -> (usize, Option<u16>) {
    let (mut sink, mut stream) = ws.split();
    let flood = tokio::spawn(async move {
        let mut sent = 0;
        while sent < PINGS {
            // 125 bytes: the largest control frame.
            if sink
                .feed(Message::Ping(vec![7u8; 125].into()))
                .await
                .is_err()
            {
                break;
            }
            sent += 1;
            if sent % 256 == 0 && sink.flush().await.is_err() {
                break;
            }
        }
        sent
    });
    served(s).await;
    let sent = tokio::time::timeout(GENEROUS * 2, flood)
        .await
        .expect("the flood ends: the server closes the connection")
        .unwrap();
    (sent, server_close(&mut stream).await)
}

/// Pings as fast as possible without reading the pongs, with and without a key: the server
/// closes the connection (1008) instead of queueing pongs, and its memory stays put.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_ping_floods_are_closed_and_memory_stays_bounded() {
    let (_tmp, s) = server_with("");
    let key = s.key("infer");
    let before = rss_kib(&s);
    for key in [None, Some(key.as_str())] {
        let ws = ws_connect(&s, key).await;
        let (sent, code) = ping_flood(&s, ws).await;
        assert!(
            sent < PINGS,
            "all {sent} pings accepted (key: {})",
            key.is_some()
        );
        if let Some(code) = code {
            assert_eq!(code, u16::from(CloseCode::Policy));
        }
    }
    let after = rss_kib(&s);
    eprintln!("ping floods: server RSS {before} KiB before, {after} KiB after");
    assert!(
        after < before + 64 * 1024,
        "RSS grew from {before} to {after} KiB"
    );
    served(&s).await;
}

/// Pings every 500 ms (within the control-frame allowance) keep no keyless socket open past
/// the first-message deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_do_not_extend_the_first_message_deadline() {
    let (_tmp, s) = server_with("[limits]\nheader_timeout_s = 2\n");
    let mut ws = ws_connect(&s, None).await;
    let closed = async {
        loop {
            tokio::select! {
                code = server_close(&mut ws) => return code,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            if ws.send(Message::Ping(vec![1].into())).await.is_err() {
                return None;
            }
        }
    };
    let code = tokio::time::timeout(GENEROUS, closed)
        .await
        .expect("closed although the client keeps pinging");
    assert_eq!(code, Some(u16::from(CloseCode::Policy)));
}

/// A frame over `max_message_bytes` is refused with 1009 before its payload is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_websocket_frame_gets_1009() {
    let (_tmp, s) = server_with("[websocket]\nmax_message_bytes = 65536\n");
    let key = s.key("infer");
    let mut ws = ws_connect(&s, Some(&key)).await;
    // Sent without waiting: the server may close while the frame is still going out.
    let _ = ws.send(Message::text("x".repeat(100_000))).await;
    assert_eq!(server_close(&mut ws).await, Some(1009));
    served(&s).await;
}

/// `/v2/events` reads nothing from its client, yet a client's frames cost it what they cost
/// `/v2/stream`: a ping flood is closed with 1008, an oversized frame with 1009.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_socket_closes_ping_floods_and_oversized_frames() {
    let (_tmp, s) = server_with("[websocket]\nmax_message_bytes = 65536\n");
    let ws = ws_connect_to(&s, "/v2/events", Some(&s.admin_key)).await;
    let (sent, code) = ping_flood(&s, ws).await;
    assert!(sent < PINGS, "all {sent} pings accepted");
    if let Some(code) = code {
        assert_eq!(code, u16::from(CloseCode::Policy));
    }
    let mut ws = ws_connect_to(&s, "/v2/events", Some(&s.admin_key)).await;
    let _ = ws.send(Message::text("x".repeat(100_000))).await;
    assert_eq!(server_close(&mut ws).await, Some(1009));
    served(&s).await;
}

/// Over-long request targets and header sections get the JSON error every other refusal has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uri_and_header_limits_answer_json() {
    let (_tmp, s) = server_with("");
    let long_uri = s.url(&format!("/v2/models/{}", "m".repeat(10_000)));
    let r = s.client.get(&long_uri).send().await.unwrap();
    assert_eq!(r.status(), 414);
    assert!(r.json::<Value>().await.unwrap()["error"].is_string());
    let mut many = s.client.get(s.url("/v2/health/live"));
    for i in 0..150 {
        many = many.header(format!("x-extra-{i}"), "1");
    }
    let r = many.send().await.unwrap();
    assert_eq!(r.status(), 431);
    assert!(r.json::<Value>().await.unwrap()["error"].is_string());
    let r = s
        .client
        .get(s.url("/v2/health/live"))
        .header("x-big", "b".repeat(70_000))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 431);
    assert!(r.json::<Value>().await.unwrap()["error"].is_string());
}

/// A body over `max_request_bytes` over HTTP/2 is a 413 answer, not a stream error, with or
/// without a declared length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_limit_body_over_http2_gets_413() {
    let (_tmp, s) = server_with("[limits]\nmax_request_bytes = 1048576\n");
    let key = s.key("infer");
    let client = client(&s, true);
    let big = vec![b' '; 4 << 20];
    for declared in [true, false] {
        let body = if declared {
            reqwest::Body::from(big.clone())
        } else {
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
                big.chunks(64 << 10).map(|c| Ok(c.to_vec())).collect();
            reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
        };
        let r = client
            .post(s.url("/v2/models/cls/infer"))
            .header("x-api-key", &key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("declared length {declared}: {e:?}"));
        assert_eq!(r.version(), reqwest::Version::HTTP_2);
        assert_eq!(r.status(), 413, "declared length {declared}");
        let error: Value = r.json().await.unwrap();
        assert!(
            error["error"].as_str().unwrap().contains("limit"),
            "{error}"
        );
    }
}

/// A JSON endpoint checks the key before it reads a byte of the body: a client without a key
/// declaring a 10 GiB body gets its 401 at once instead of the server waiting to buffer it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_endpoints_refuse_a_keyless_body_before_reading_it() {
    // Far longer than GENEROUS: a server that waits for the body never answers in time.
    let (_tmp, s) = server_with("[limits]\nbody_timeout_s = 120\n");
    let connector = tls_connector(&s, b"http/1.1");
    let addr = hostport(&s.url("/"));
    for (method, path) in [
        ("POST", "/api/keys"),
        ("PATCH", "/api/keys/1"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/embeddings"),
        ("POST", "/v2/repository/index"),
    ] {
        let mut tls = tls_connect(&connector, &addr).await.unwrap();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
             content-length: 10737418240\r\n\r\n{{\"model\": \"x\", "
        );
        let (status, answer) = http1_exchange(&mut tls, &request).await;
        assert_eq!(status, 401, "{method} {path}: {answer}");
        assert!(answer.contains("\"error\""), "{method} {path}: {answer}");
    }
}
