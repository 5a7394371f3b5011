//! The reply encoding of the RESP door: simple strings, errors, integers, bulk strings, nulls,
//! arrays and maps, each written in RESP2 or RESP3 as the session speaks.

use super::Session;

pub(super) fn simple(out: &mut Vec<u8>, text: &str) {
    out.push(b'+');
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// An error reply: `text` starts with its code (`ERR …`); line breaks are flattened.
pub(super) fn error_reply(out: &mut Vec<u8>, text: &str) {
    out.push(b'-');
    out.extend(
        text.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

pub(super) fn integer(out: &mut Vec<u8>, n: i64) {
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub(super) fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

pub(super) fn null(out: &mut Vec<u8>, session: &Session) {
    out.extend_from_slice(if session.protocol == 3 {
        b"_\r\n"
    } else {
        b"$-1\r\n"
    });
}

pub(super) fn array_header(out: &mut Vec<u8>, len: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A map of `pairs` entries: a RESP3 map, or a flat array of twice as many in RESP2.
pub(super) fn map_header(out: &mut Vec<u8>, session: &Session, pairs: usize) {
    if session.protocol == 3 {
        out.push(b'%');
        out.extend_from_slice(itoa::Buffer::new().format(pairs).as_bytes());
        out.extend_from_slice(b"\r\n");
    } else {
        array_header(out, pairs * 2);
    }
}

pub(super) fn id_value(id: u64) -> i64 {
    // IDs are 63-bit: always a non-negative i64.
    i64::try_from(id).unwrap_or(i64::MAX)
}
