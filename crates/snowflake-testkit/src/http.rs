//! A tiny blocking HTTP/1.1 client for tests: one request per connection (`Connection: close`),
//! read to EOF, chunked bodies decoded, JSON helpers for the service's answers.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Socket read/write timeout of the HTTP client.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Response {
    /// A header's value, by lowercase name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The body as JSON; panics with the body if it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    /// The `error` of a JSON error body; checks the content type and shape.
    pub fn error(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{self:?}"
        );
        let json = self.json();
        let object = json.as_object().expect("an object");
        assert_eq!(object.len(), 1, "only `error`: {json}");
        object["error"]
            .as_str()
            .unwrap_or_else(|| panic!("error is not a string: {json}"))
            .to_owned()
    }

    /// The IDs of a 200 `/v1/id` or `/v1/ids` JSON answer; each must be a JSON string.
    pub fn ids(&self) -> Vec<u64> {
        assert_eq!(self.status, 200, "{self:?}");
        let json = self.json();
        let strings: Vec<&serde_json::Value> = if let Some(id) = json.get("id") {
            vec![id]
        } else {
            json["ids"]
                .as_array()
                .unwrap_or_else(|| panic!("neither id nor ids: {json}"))
                .iter()
                .collect()
        };
        strings
            .into_iter()
            .map(|v| {
                v.as_str()
                    .unwrap_or_else(|| panic!("an id that is not a JSON string: {v}"))
                    .parse()
                    .unwrap_or_else(|e| panic!("an id that is not a number ({e}): {v}"))
            })
            .collect()
    }
}

/// `GET path` on a fresh connection.
pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[])
}

/// `GET path` on a fresh connection; an I/O error (e.g. the server is restarting) is returned,
/// not a panic.
pub fn try_get(addr: SocketAddr, path: &str) -> std::io::Result<Response> {
    try_request(addr, "GET", path, &[])
}

/// One request on a fresh connection with `Connection: close`, read to EOF.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    try_request(addr, method, path, headers)
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"))
}

/// [`request`], with I/O errors returned.
pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Response> {
    let try_once = || -> std::io::Result<Response> {
        let mut stream = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT)?;
        stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
        stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n"
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes())?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        // A server shutting down may close the connection without answering.
        if !raw.windows(4).any(|w| w == b"\r\n\r\n") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "connection closed after {} bytes, before a response",
                    raw.len()
                ),
            ));
        }
        Ok(parse_response(&raw))
    };
    try_once()
}

fn parse_response(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let split = text
        .find("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of headers in {text:?}"));
    let (head, body) = (&text[..split], &text[split + 4..]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    assert!(
        version.starts_with("HTTP/1."),
        "status line {status_line:?}"
    );
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line {status_line:?}"));
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
    {
        dechunk(body)
    } else {
        if let Some(length) = headers.get("content-length") {
            let length: usize = length.parse().expect("numeric content-length");
            assert_eq!(body.len(), length, "body length vs content-length");
        }
        body.to_owned()
    };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    loop {
        let (size_line, after) = rest.split_once("\r\n").expect("chunk size line");
        let size_text = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).expect("hex chunk size");
        if size == 0 {
            return body;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}
