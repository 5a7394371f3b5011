//! Every front door as the listener tests see it: its address, a client that speaks its
//! protocol at the byte level (plain or over TLS), one request that a healthy door answers, and
//! the answer it gives a connection over the cap.

use crate::support::TestServer;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// A front door.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    Http,
    Admin,
    Grpc,
    Thrift,
    Resp,
}

impl Door {
    /// Every door.
    pub const ALL: [Door; 5] = [
        Door::Http,
        Door::Admin,
        Door::Grpc,
        Door::Thrift,
        Door::Resp,
    ];
    /// The doors that serve TLS when the node has a certificate.
    pub const TLS: [Door; 3] = [Door::Http, Door::Grpc, Door::Resp];

    pub fn addr(self, server: &TestServer) -> SocketAddr {
        match self {
            Door::Http => Some(server.addr),
            Door::Admin => server.admin_addr,
            Door::Grpc => server.grpc_addr,
            Door::Thrift => server.thrift_addr,
            Door::Resp => server.resp_addr,
        }
        .unwrap_or_else(|| panic!("{self:?} is off"))
    }

    /// The protocol this door's TLS handshake speaks (ALPN).
    fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            Door::Http | Door::Admin => vec![b"http/1.1".to_vec()],
            Door::Grpc => vec![b"h2".to_vec()],
            Door::Thrift | Door::Resp => Vec::new(),
        }
    }
}

/// A byte stream to a door: TCP, or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

pub type Stream = Box<dyn Io>;

/// A TCP connection to `door`.
pub async fn tcp(server: &TestServer, door: Door) -> TcpStream {
    TcpStream::connect(door.addr(server))
        .await
        .expect("connect")
}

/// A connection to `door`: TCP, or TLS with `tls` when given.
pub async fn connect(
    server: &TestServer,
    door: Door,
    tls: Option<&TlsClient>,
) -> std::io::Result<Stream> {
    let tcp = tcp(server, door).await;
    match tls {
        None => Ok(Box::new(tcp)),
        Some(tls) => tls.connect(door, tcp).await,
    }
}

/// The client side of TLS: the CA that signed the node's certificate, and maybe a client
/// certificate of our own.
#[derive(Clone)]
pub struct TlsClient {
    roots: Arc<rustls::RootCertStore>,
    identity: Option<(Vec<CertificateDer<'static>>, Arc<PrivateKeyDer<'static>>)>,
}

impl TlsClient {
    /// Trusting the CA certificate in `ca`, without a client certificate.
    pub fn new(ca: &Path) -> TlsClient {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).expect("CA file") {
            roots.add(cert.expect("CA certificate")).expect("usable CA");
        }
        TlsClient {
            roots: Arc::new(roots),
            identity: None,
        }
    }

    /// The same, presenting the client certificate `cert` with its key `key`.
    pub fn with_identity(&self, cert: &Path, key: &Path) -> TlsClient {
        let chain = CertificateDer::pem_file_iter(cert)
            .expect("certificate file")
            .collect::<Result<Vec<_>, _>>()
            .expect("certificates");
        let key = PrivateKeyDer::from_pem_file(key).expect("key");
        TlsClient {
            roots: Arc::clone(&self.roots),
            identity: Some((chain, Arc::new(key))),
        }
    }

    /// A TLS session with `door` over `tcp`; an error when the handshake fails (as far as the
    /// client can tell).
    pub async fn connect(&self, door: Door, tcp: TcpStream) -> std::io::Result<Stream> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(Arc::clone(&self.roots));
        let mut config = match &self.identity {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain.clone(), key.clone_key())
                .expect("client certificate"),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = door.alpn();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = ServerName::try_from("localhost").expect("a name");
        // With TLS 1.3 a refused client certificate shows only on the first read after this:
        // the refusals are seen on the first request.
        let stream = connector.connect(name, tcp).await?;
        Ok(Box::new(stream))
    }
}

/// The files of a CA, a server certificate it signed for loopback, a client certificate it
/// signed, and a client certificate of another CA; removed when dropped.
pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    pub fn new() -> Certs {
        use snowflake_testkit::certs::{LOOPBACK, Usage};
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path();
        snowflake_testkit::certs::ca(path, "ca", "ca", 30).expect("test certificates: CA");
        snowflake_testkit::certs::ca(path, "other-ca", "other-ca", 30)
            .expect("test certificates: CA");
        let server = Usage::Server(LOOPBACK);
        snowflake_testkit::certs::issue(path, "server", "snowflake", "ca", server, 30)
            .expect("test certificates: server certificate");
        snowflake_testkit::certs::issue(path, "client", "client", "ca", Usage::Client, 30)
            .expect("test certificates: client certificate");
        snowflake_testkit::certs::issue(path, "foreign", "intruder", "other-ca", Usage::Client, 30)
            .expect("test certificates: client certificate");
        Certs { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The node's TLS settings; `mutual`: clients must present a certificate of the CA.
    pub fn server_files(&self, mutual: bool) -> snowflake_server::tls::TlsFiles {
        snowflake_server::tls::TlsFiles {
            cert: self.path("server.crt"),
            key: self.path("server.key"),
            client_ca: mutual.then(|| self.path("ca.crt")),
        }
    }

    /// A client that trusts the CA and presents no certificate.
    pub fn anonymous(&self) -> TlsClient {
        TlsClient::new(&self.path("ca.crt"))
    }

    /// A client with a certificate of the CA.
    pub fn member(&self) -> TlsClient {
        self.anonymous()
            .with_identity(&self.path("client.crt"), &self.path("client.key"))
    }

    /// A client with a certificate of another CA.
    pub fn stranger(&self) -> TlsClient {
        self.anonymous()
            .with_identity(&self.path("foreign.crt"), &self.path("foreign.key"))
    }
}

/// A connection speaking a door's protocol.
pub enum Client {
    /// HTTP/1.1 with keep-alive (the HTTP and the admin door), and its connection's task.
    Http(
        hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
        JoinHandle<()>,
    ),
    /// HTTP/2 (gRPC), its connection's task (which answers the server's pings), and a handle
    /// to ping the server.
    Grpc(h2::client::SendRequest<Bytes>, JoinHandle<()>, h2::PingPong),
    /// Framed Thrift, and the next sequence id.
    Thrift(Stream, i32),
    /// RESP.
    Resp(Stream),
}

impl Client {
    /// A client of `door` on `stream` (for gRPC, once the HTTP/2 preface is sent).
    pub async fn open(door: Door, stream: Stream) -> Result<Client, String> {
        Ok(match door {
            Door::Http | Door::Admin => {
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(|e| format!("http handshake: {e}"))?;
                let task = tokio::spawn(async move {
                    let _ = connection.await;
                });
                Client::Http(sender, task)
            }
            Door::Grpc => {
                let (sender, mut connection) = h2::client::handshake(stream)
                    .await
                    .map_err(|e| format!("http/2 handshake: {e}"))?;
                let ping = connection
                    .ping_pong()
                    .expect("the connection's ping handle");
                let task = tokio::spawn(async move {
                    let _ = connection.await;
                });
                Client::Grpc(sender, task, ping)
            }
            Door::Thrift => Client::Thrift(stream, 0),
            Door::Resp => Client::Resp(stream),
        })
    }

    /// A plain TCP client of `door`, open and served once (retried for a moment: a slot of an
    /// earlier connection may still be taken).
    pub async fn served(server: &TestServer, door: Door) -> Client {
        Client::served_over(server, door, None).await
    }

    /// [`Client::served`], over TLS with `tls` when given.
    pub async fn served_over(server: &TestServer, door: Door, tls: Option<&TlsClient>) -> Client {
        let mut last = String::new();
        for _ in 0..200 {
            let stream = match connect(server, door, tls).await {
                Ok(stream) => stream,
                Err(err) => {
                    last = format!("TLS handshake: {err}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            match Client::open(door, stream).await {
                Ok(mut client) => match client.call().await {
                    Ok(()) => return client,
                    Err(err) => last = err,
                },
                Err(err) => last = err,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{door:?}: no connection served within 2 s: {last}");
    }

    /// One request a healthy door answers: `/healthz`, `NextId`, `get_worker_id`, `PING`.
    /// `Ok` when answered as it should be; else what happened.
    pub async fn call(&mut self) -> Result<(), String> {
        let within = Duration::from_secs(5);
        match tokio::time::timeout(within, self.call_once()).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {within:?}")),
        }
    }

    async fn call_once(&mut self) -> Result<(), String> {
        match self {
            Client::Http(sender, _) => {
                let reply = http_get(sender, "/healthz").await?;
                if reply.0 == 200 {
                    Ok(())
                } else {
                    Err(format!("answered {reply:?}"))
                }
            }
            Client::Grpc(sender, _, _) => {
                let (status, _) = grpc_next_id(sender).await?;
                if status == "0" {
                    Ok(())
                } else {
                    Err(format!("grpc-status {status}"))
                }
            }
            Client::Thrift(stream, seq) => {
                *seq += 1;
                stream
                    .write_all(&thrift_call("get_worker_id", *seq))
                    .await
                    .map_err(|e| format!("write: {e}"))?;
                let reply = read_frame(stream).await?;
                // A reply to our call, with its sequence id, holding the worker id.
                match snowflake_proto::thrift::peer::decode_reply(&reply, "get_worker_id", *seq) {
                    Ok(snowflake_proto::thrift::peer::Answer::I64(_)) => Ok(()),
                    Ok(answer) => Err(format!("answered {answer:?}")),
                    Err(err) => Err(format!("not a reply ({err}): {reply:?}")),
                }
            }
            Client::Resp(stream) => {
                stream
                    .write_all(b"PING\r\n")
                    .await
                    .map_err(|e| format!("write: {e}"))?;
                let reply = read_some(stream, 7, Duration::from_secs(5)).await;
                if reply == b"+PONG\r\n" {
                    Ok(())
                } else {
                    Err(format!("answered {:?}", String::from_utf8_lossy(&reply)))
                }
            }
        }
    }

    /// Waits (at most `within`) until the server has closed the connection; false if it is
    /// still open then.
    pub async fn closed_within(self, within: Duration) -> bool {
        match self {
            Client::Http(_, task) | Client::Grpc(_, task, _) => {
                tokio::time::timeout(within, task).await.is_ok()
            }
            Client::Thrift(mut stream, _) | Client::Resp(mut stream) => {
                closed_within(&mut stream, within).await
            }
        }
    }
}

/// Reads and drops whatever comes (an HTTP/2 server's settings, say) until the peer closes the
/// connection (true) or `within` passes (false).
pub async fn closed_within(stream: &mut (impl AsyncRead + Unpin), within: Duration) -> bool {
    closed_after(stream, within).await.is_some()
}

/// What the peer sent until it closed the connection; `None` if it was still open after
/// `within`.
pub async fn closed_after(
    stream: &mut (impl AsyncRead + Unpin),
    within: Duration,
) -> Option<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
    }
}

/// Reads until `want` bytes arrived, the peer closed (fewer), or `within` passed.
pub async fn read_some(
    stream: &mut (impl AsyncRead + Unpin),
    want: usize,
    within: Duration,
) -> Vec<u8> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    while got.len() < want {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

/// `GET path` on a kept-alive HTTP/1.1 connection: the status, the headers and the body.
pub async fn http_get(
    sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    path: &str,
) -> Result<(u16, http::HeaderMap, String), String> {
    sender.ready().await.map_err(|e| format!("closed: {e}"))?;
    let request = hyper::Request::get(path)
        .header("host", "127.0.0.1")
        .body(Empty::<Bytes>::new())
        .expect("request");
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("no answer: {e}"))?;
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok((
        parts.status.as_u16(),
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    ))
}

/// A `NextId` call: its `grpc-status` (from the trailers, or the headers of a trailers-only
/// answer) and the response body.
pub async fn grpc_next_id(
    sender: &mut h2::client::SendRequest<Bytes>,
) -> Result<(String, Vec<u8>), String> {
    *sender = sender
        .clone()
        .ready()
        .await
        .map_err(|e| format!("closed: {e}"))?;
    let (response, _) = grpc_call(sender, "NextId", Some(vec![0, 0, 0, 0, 0]))?;
    let response = response.await.map_err(|e| format!("no answer: {e}"))?;
    let (parts, mut body) = response.into_parts();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| format!("body: {e}"))?;
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    let trailers = body
        .trailers()
        .await
        .map_err(|e| format!("trailers: {e}"))?;
    let status = trailers
        .as_ref()
        .unwrap_or(&parts.headers)
        .get("grpc-status")
        .map(|v| v.to_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    Ok((status, bytes))
}

/// Starts a call of `method` of `snowflake.v1.Snowflake` with `body` (none: the request stays
/// open, its message never sent).
pub fn grpc_call(
    sender: &mut h2::client::SendRequest<Bytes>,
    method: &str,
    body: Option<Vec<u8>>,
) -> Result<(h2::client::ResponseFuture, h2::SendStream<Bytes>), String> {
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://127.0.0.1/snowflake.v1.Snowflake/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
    let (response, mut send) = sender
        .send_request(request, false)
        .map_err(|e| format!("cannot send: {e}"))?;
    if let Some(body) = body {
        send.send_data(body.into(), true)
            .map_err(|e| format!("cannot send: {e}"))?;
    }
    Ok((response, send))
}

/// A framed, strict Thrift call of `name` with no arguments (proto's codec).
pub fn thrift_call(name: &str, seq: i32) -> Vec<u8> {
    let mut frame = Vec::new();
    snowflake_proto::thrift::peer::encode_call(&mut frame, name, seq, None);
    frame
}

/// One Thrift frame's payload.
pub async fn read_frame(stream: &mut (impl AsyncRead + Unpin)) -> Result<Vec<u8>, String> {
    let len = stream
        .read_u32()
        .await
        .map_err(|e| format!("no frame: {e}"))?;
    let mut payload = vec![0u8; len as usize];
    stream
        .read_exact(&mut payload)
        .await
        .map_err(|e| format!("a short frame: {e}"))?;
    Ok(payload)
}
