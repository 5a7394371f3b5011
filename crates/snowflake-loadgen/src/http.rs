//! The HTTP/1.1 protocol: keep-alive connections with hyper's client, `GET /v1/id` or
//! `GET /v1/ids?count=N`, and a check of every JSON answer.

use crate::config::BenchConfig;
use crate::engine::{Client, ConnectFailure, Failure};
use bytes::Bytes;
use http::header::{ACCEPT, HOST};
use http::{HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use snowflake_core::SnowflakeId;
use std::borrow::Cow;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The most bytes one ID takes in a JSON array: 19 digits, two quotes, a comma, some space.
const BYTES_PER_ID: usize = 32;
/// Room for the JSON around the IDs, or for an error body.
const BODY_OVERHEAD: usize = 4096;

/// Speaks HTTP/1.1 to one target; shared by every connection task.
#[derive(Debug)]
pub(crate) struct HttpClient {
    /// The target's addresses, tried in order on every connection attempt.
    addrs: Vec<SocketAddr>,
    /// The `Host` header: the target as given.
    host: HeaderValue,
    /// `/v1/id`, or `/v1/ids?count=N` for a batch.
    uri: Uri,
    /// IDs expected in every answer.
    batch: u32,
    /// How long a connection attempt or a request may take.
    timeout: Duration,
    /// The largest body read; a longer one is a bad response.
    body_limit: usize,
    /// HTTPS: the connector and the server name to verify.
    tls: Option<Https>,
    /// The largest valid ID (the layout's).
    max_id: u64,
}

/// What an HTTPS connection starts from.
struct Https(
    tokio_rustls::TlsConnector,
    rustls_pki_types::ServerName<'static>,
);

impl fmt::Debug for Https {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Https")
            .field(&self.1)
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client for `config`'s target, at the already resolved `addrs`.
    pub(crate) fn new(config: &BenchConfig, addrs: Vec<SocketAddr>) -> HttpClient {
        let batch = config.batch();
        let path = if batch == 1 {
            Uri::from_static("/v1/id")
        } else {
            // Digits only: always a valid origin-form URI.
            Uri::try_from(format!("/v1/ids?count={batch}"))
                .unwrap_or_else(|_| Uri::from_static("/v1/ids"))
        };
        HttpClient {
            addrs,
            // The address was checked to be HOST:PORT in visible ASCII.
            host: HeaderValue::from_str(config.addr())
                .unwrap_or_else(|_| HeaderValue::from_static("localhost")),
            uri: path,
            batch,
            timeout: config.timeout(),
            body_limit: BODY_OVERHEAD + BYTES_PER_ID * batch as usize,
            tls: config.tls().and_then(|tls| {
                // Both were checked when the configuration was built.
                let connector = tls.client_config(b"http/1.1").ok()?;
                let name = crate::tls::server_name(config.addr()).ok()?;
                Some(Https(tokio_rustls::TlsConnector::from(connector), name))
            }),
            max_id: config.max_id(),
        }
    }
}

/// One keep-alive connection; dropping it closes the connection.
#[derive(Debug)]
pub(crate) struct HttpConnection {
    /// Where requests go.
    sender: SendRequest<Empty<Bytes>>,
    /// The task driving the connection's I/O, aborted when the connection is dropped.
    driver: AbortOnDrop,
}

/// Aborts a task when dropped, so no connection outlives its owner.
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Client for HttpClient {
    type Connection = HttpConnection;

    async fn connect(&self) -> Result<HttpConnection, ConnectFailure> {
        let stream = crate::engine::connect_tcp(&self.addrs, self.timeout).await?;
        let (sender, driver) = match &self.tls {
            None => {
                let (sender, connection) = http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(|err| ConnectFailure::other(err.to_string()))?;
                // Its error reaches the sender's next request, which counts it.
                let driver = tokio::spawn(async move {
                    let _ = connection.await;
                });
                (sender, driver)
            }
            Some(Https(connector, name)) => {
                let stream =
                    tokio::time::timeout(self.timeout, connector.connect(name.clone(), stream))
                        .await
                        .map_err(|_| ConnectFailure::timed_out())?
                        .map_err(|err| ConnectFailure::other(format!("TLS handshake: {err}")))?;
                let (sender, connection) = http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(|err| ConnectFailure::other(err.to_string()))?;
                let driver = tokio::spawn(async move {
                    let _ = connection.await;
                });
                (sender, driver)
            }
        };
        Ok(HttpConnection {
            sender,
            driver: AbortOnDrop(driver),
        })
    }

    async fn ready(&self, connection: &mut HttpConnection) -> bool {
        if connection.driver.0.is_finished() {
            return false;
        }
        matches!(
            tokio::time::timeout(self.timeout, connection.sender.ready()).await,
            Ok(Ok(()))
        )
    }

    async fn request(&self, connection: &mut HttpConnection) -> Result<u64, Failure> {
        let mut request = Request::new(Empty::new());
        *request.uri_mut() = self.uri.clone();
        request.headers_mut().insert(HOST, self.host.clone());
        request
            .headers_mut()
            .insert(ACCEPT, HeaderValue::from_static("application/json"));
        let exchange = async {
            let response = connection
                .sender
                .send_request(request)
                .await
                .map_err(|err| hyper_failure(&err))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), self.body_limit)
                .collect()
                .await
                .map_err(|err| body_failure(&*err))?
                .to_bytes();
            if status != StatusCode::OK {
                return Err(Failure::kept(Cow::Owned(format!(
                    "http_{}",
                    status.as_u16()
                ))));
            }
            match count_ids(&body, self.batch, self.max_id) {
                Some(count) if count == u64::from(self.batch) => Ok(count),
                _ => Err(Failure::kept(Cow::Borrowed("bad_response"))),
            }
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(Failure::lost(Cow::Borrowed("timeout"))))
    }
}

/// Classifies an error of a request or response on the wire; the connection is dropped.
fn hyper_failure(err: &hyper::Error) -> Failure {
    let kind = if err.is_timeout() {
        "timeout"
    } else if err.is_parse() || err.is_parse_status() {
        "bad_http"
    } else if err.is_canceled() || err.is_closed() || err.is_incomplete_message() {
        "connection_closed"
    } else {
        io_kind(err)
    };
    Failure::lost(Cow::Borrowed(kind))
}

/// Classifies an error reading a body; the connection is dropped.
fn body_failure(err: &(dyn std::error::Error + 'static)) -> Failure {
    if err.is::<LengthLimitError>() {
        Failure::lost(Cow::Borrowed("bad_response"))
    } else if let Some(err) = err.downcast_ref::<hyper::Error>() {
        hyper_failure(err)
    } else {
        Failure::lost(Cow::Borrowed("transport"))
    }
}

/// The kind of the I/O error underneath `err`, if any.
fn io_kind(err: &(dyn std::error::Error + 'static)) -> &'static str {
    let mut source = err.source();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return match io.kind() {
                io::ErrorKind::ConnectionReset => "connection_reset",
                io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::UnexpectedEof => "connection_closed",
                io::ErrorKind::TimedOut => "timeout",
                _ => "io_error",
            };
        }
        source = cause.source();
    }
    "transport"
}

/// The number of IDs in a valid answer: `{"id":"<decimal>"}` for a batch of 1,
/// `{"ids":["<decimal>",...]}` otherwise; `None` for anything else.
fn count_ids(body: &[u8], batch: u32, max_id: u64) -> Option<u64> {
    if batch == 1 {
        #[derive(Deserialize)]
        struct One<'a> {
            #[serde(borrow)]
            id: &'a str,
        }
        let one: One<'_> = serde_json::from_slice(body).ok()?;
        is_id(one.id, max_id).then_some(1)
    } else {
        let mut deserializer = serde_json::Deserializer::from_slice(body);
        let count = deserializer.deserialize_map(IdsObject(max_id)).ok()?;
        deserializer.end().ok()?;
        Some(count)
    }
}

/// Whether `text` is a Snowflake ID in decimal, at most `max_id`.
fn is_id(text: &str, max_id: u64) -> bool {
    text.bytes().all(|b| b.is_ascii_digit())
        && text
            .parse::<SnowflakeId>()
            .is_ok_and(|id| id.as_u64() <= max_id)
}

/// A JSON array of decimal ID strings, counted without being collected.
struct IdCount(u64);

/// `{"ids":[…]}` (other fields ignored): its array counted, each ID at most the largest it
/// holds.
struct IdsObject(u64);

impl<'de> Visitor<'de> for IdsObject {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object with an \"ids\" array")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut count = None;
        while let Some(key) = map.next_key::<&'de str>()? {
            if key != "ids" {
                map.next_value::<de::IgnoredAny>()?;
            } else if count.is_some() {
                return Err(de::Error::duplicate_field("ids"));
            } else {
                count = Some(map.next_value_seed(IdCountVisitor(self.0))?.0);
            }
        }
        count.ok_or_else(|| de::Error::missing_field("ids"))
    }
}

impl<'de> de::DeserializeSeed<'de> for IdCountVisitor {
    type Value = IdCount;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<IdCount, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

/// Counts and checks the elements of an ID array (each at most the largest ID it holds).
struct IdCountVisitor(u64);

impl<'de> Visitor<'de> for IdCountVisitor {
    type Value = IdCount;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of snowflake ids as decimal strings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IdCount, A::Error> {
        let mut count = 0_u64;
        while let Some(id) = seq.next_element::<&'de str>()? {
            if !is_id(id, self.0) {
                return Err(de::Error::invalid_value(de::Unexpected::Str(id), &self));
            }
            count += 1;
        }
        Ok(IdCount(count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_counted_and_checked_against_the_layouts_largest_id() {
        let max = SnowflakeId::MAX.as_u64();
        let js = (1u64 << 53) - 1;
        assert_eq!(count_ids(br#"{"id":"5"}"#, 1, max), Some(1));
        assert_eq!(count_ids(br#"{"id":"9007199254740992"}"#, 1, js), None);
        assert_eq!(count_ids(br#"{"ids":["1","2","3"]}"#, 3, max), Some(3));
        assert_eq!(
            count_ids(br#"{"x":1,"ids":["1","9007199254740991"]}"#, 2, js),
            Some(2)
        );
        assert_eq!(
            count_ids(br#"{"ids":["1","9007199254740992"]}"#, 2, js),
            None
        );
        assert_eq!(count_ids(br#"{"ids":["1"],"ids":["2"]}"#, 1, max), None);
        assert_eq!(count_ids(br#"{"ids":["1"]} x"#, 1, max), None);
        assert_eq!(count_ids(br#"{"ids":[1]}"#, 1, max), None);
        assert_eq!(count_ids(br#"{}"#, 2, max), None);
    }
}
