//! IDs in JSON answers: decimal strings (the default), or numbers with `format=number` where the
//! layout allows it; and the body of a large batch, formatted a piece at a time as the connection
//! asks for it.

use crate::node::Node;

/// How IDs are written in a JSON answer: decimal strings (the default: JavaScript loses
/// precision above 2^53), or numbers with `format=number`, which only a layout whose IDs all fit
/// 53 bits allows (SPEC §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    String,
    Number,
}

impl Format {
    /// The `format` query parameter of `query`, checked against the node's layout before any ID
    /// is issued; the error is a 400's message.
    pub(crate) fn of(node: &Node, query: Option<&str>) -> Result<Format, String> {
        let given = query
            .unwrap_or("")
            .split('&')
            .find_map(|pair| pair.strip_prefix("format="));
        match given {
            None | Some("string") => Ok(Format::String),
            Some("number") if node.layout().ids_fit_js_number() => Ok(Format::Number),
            Some("number") => {
                let layout = node.layout();
                Err(format!(
                    "format=number needs a layout whose ids all fit a JavaScript number (at most \
                     {}), and this node's layout {} has ids up to {}; read the ids as strings \
                     (format=string, the default), or run a fleet under --layout js-safe",
                    snowflake_core::MAX_SAFE_INTEGER,
                    layout.name(),
                    layout.max_id()
                ))
            }
            Some(other) => {
                let shown: String = other.chars().take(40).collect();
                Err(format!(
                    "invalid format: expected string or number, found {shown:?}"
                ))
            }
        }
    }

    /// The quote around each ID: `"` for strings, nothing for numbers.
    pub(crate) fn quote(self) -> &'static [u8] {
        match self {
            Format::String => b"\"",
            Format::Number => b"",
        }
    }
}

/// The `{"ids":[…]}` body of a large batch, formatted [`IdsBody::CHUNK_BYTES`] at a time as
/// the connection asks for it. Its exact length is known up front (so the answer carries a
/// `Content-Length`, as a small one does, rather than chunked encoding).
pub(crate) struct IdsBody {
    /// The runs of consecutive IDs still to format, the current one first.
    batches: std::vec::IntoIter<snowflake_core::IdBatch>,
    /// The next ID of the current run, and its last.
    next: Option<(u64, u64)>,
    /// Whether the opening `{"ids":[` is written, and whether the closing `]}` is.
    started: bool,
    finished: bool,
    /// Bytes not yet handed out.
    remaining: u64,
    /// Strings or numbers.
    format: Format,
    /// The yield between two chunks, while it is pending. Without it a client that reads as fast
    /// as we write (loopback) has the whole body formatted and written in one poll of its
    /// connection, holding a runtime thread for tens of milliseconds.
    yielding: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    /// Its share of the node's budget for bulk replies, given back when the body is dropped.
    _permit: Option<crate::bulk::BulkPermit>,
}

impl IdsBody {
    /// About one socket write: small enough that formatting it takes tens of microseconds.
    pub(crate) const CHUNK_BYTES: usize = 64 * 1024;

    pub(crate) fn new(batches: Vec<snowflake_core::IdBatch>, format: Format) -> IdsBody {
        let count: u64 = batches.iter().map(|b| b.len()).sum();
        let digits: u64 = batches
            .iter()
            .map(|b| decimal_digits_in(b.first().as_u64(), b.last().as_u64()))
            .sum();
        // `{"ids":[` and `]}`, the quotes around each ID, a comma between two.
        let quotes = format.quote().len() as u64 * 2;
        let remaining = 10 + digits + quotes * count + count.saturating_sub(1);
        IdsBody {
            batches: batches.into_iter(),
            next: None,
            started: false,
            finished: false,
            remaining,
            format,
            yielding: None,
            _permit: None,
        }
    }

    /// The body, holding `permit` until it is dropped (sent, or its connection gone).
    pub(crate) fn holding(mut self, permit: Option<crate::bulk::BulkPermit>) -> IdsBody {
        self._permit = permit;
        self
    }

    /// The next chunk, or `None` once the closing `]}` was handed out.
    pub(crate) fn chunk(&mut self) -> Option<bytes::Bytes> {
        if self.finished {
            return None;
        }
        let mut out = Vec::with_capacity(Self::CHUNK_BYTES + 32);
        let mut buf = itoa::Buffer::new();
        if !self.started {
            out.extend_from_slice(b"{\"ids\":[");
        }
        while out.len() < Self::CHUNK_BYTES {
            let (id, last) = match self.next {
                Some(run) => run,
                None => match self.batches.next() {
                    Some(batch) => (batch.first().as_u64(), batch.last().as_u64()),
                    None => {
                        out.extend_from_slice(b"]}");
                        self.finished = true;
                        break;
                    }
                },
            };
            if self.started {
                out.push(b',');
            }
            self.started = true;
            out.extend_from_slice(self.format.quote());
            out.extend_from_slice(buf.format(id).as_bytes());
            out.extend_from_slice(self.format.quote());
            self.next = (id < last).then_some((id + 1, last));
        }
        self.remaining = self.remaining.saturating_sub(out.len() as u64);
        Some(bytes::Bytes::from(out))
    }
}

impl http_body::Body for IdsBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        let this = self.get_mut();
        // Every chunk after the first waits for the runtime to run the tasks queued meanwhile.
        if this.started {
            let yielding = this
                .yielding
                .get_or_insert_with(|| Box::pin(tokio::task::yield_now()));
            std::task::ready!(yielding.as_mut().poll(cx));
            this.yielding = None;
        }
        std::task::Poll::Ready(this.chunk().map(|c| Ok(http_body::Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.finished
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

/// How many decimal digits the numbers `first..=last` take together.
fn decimal_digits_in(first: u64, last: u64) -> u64 {
    let mut total = 0;
    let mut low = first;
    while low <= last {
        let digits = u64::from(low.checked_ilog10().unwrap_or(0)) + 1;
        // The last number with as many digits, or `last`.
        let high = 10u64
            .checked_pow(u32::try_from(digits).unwrap_or(u32::MAX))
            .map_or(u64::MAX, |p| p - 1)
            .min(last);
        total += (high - low + 1) * digits;
        match high.checked_add(1) {
            Some(next) => low = next,
            None => break,
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_of_a_range_are_counted_across_powers_of_ten() {
        let brute = |a: u64, b: u64| (a..=b).map(|n| n.to_string().len() as u64).sum::<u64>();
        for (a, b) in [
            (0, 0),
            (0, 9),
            (5, 123),
            (9, 10),
            (99, 1001),
            (999_990, 1_000_020),
        ] {
            assert_eq!(decimal_digits_in(a, b), brute(a, b), "{a}..={b}");
        }
        let max = snowflake_core::SnowflakeId::MAX.as_u64();
        assert_eq!(decimal_digits_in(max - 5, max), 6 * 19);
        assert_eq!(decimal_digits_in(u64::MAX - 1, u64::MAX), 2 * 20);
    }

    #[test]
    fn a_large_body_in_chunks_is_the_small_body_exactly_with_its_length_known() {
        let generator = snowflake_core::Generator::new(0, 0).unwrap();
        let batches: Vec<_> = (0..40)
            .map(|_| generator.next_batch(1000).unwrap())
            .collect();
        let ids: Vec<String> = batches
            .iter()
            .flat_map(|b| b.into_iter())
            .map(|id| format!("\"{id}\""))
            .collect();
        let expected = format!("{{\"ids\":[{}]}}", ids.join(","));
        let mut body = IdsBody::new(batches, Format::String);
        assert_eq!(
            http_body::Body::size_hint(&body).exact(),
            Some(expected.len() as u64)
        );
        let mut out = Vec::new();
        let mut chunks = 0;
        while let Some(chunk) = body.chunk() {
            assert!(chunk.len() <= IdsBody::CHUNK_BYTES + 32);
            out.extend_from_slice(&chunk);
            chunks += 1;
        }
        assert!(chunks > 10, "{chunks}");
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        assert!(http_body::Body::is_end_stream(&body));
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(0));
    }
}
