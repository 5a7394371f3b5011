//! What one line of input holds: one decimal ID, or a JSON object with an `"id"` and/or an
//! `"ids"` array (as `snowflake decode --json`, `GET /v1/id` and `GET /v1/ids` print them).

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use snowflake_core::SnowflakeId;
use std::fmt;

/// The largest ID of any layout: 2^63 − 1.
const MAX_ID: u64 = SnowflakeId::MAX.as_u64();

/// What a line holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// Nothing but whitespace.
    Blank,
    /// One ID (a decimal line, or a JSON line with `"id"` alone: the common case, no allocation).
    One(u64),
    /// The IDs of a JSON line (`"id"` first, then the `"ids"` in order).
    Many(Vec<u64>),
}

/// Reads one line (without its newline). Surrounding ASCII whitespace (a `\r`, spaces) is
/// ignored. The error says why the line holds no valid ID; an ID above `max_id` (the layout's
/// largest) makes the line invalid.
pub(crate) fn parse_line(line: &[u8], max_id: u64) -> Result<Parsed, String> {
    let line = line.trim_ascii();
    let parsed = match line.first() {
        None => Ok(Parsed::Blank),
        Some(b'{') => parse_json(line),
        Some(_) => parse_decimal(line, max_id).map(Parsed::One),
    }?;
    if max_id < MAX_ID {
        let above = match &parsed {
            Parsed::Blank => None,
            Parsed::One(id) => Some(*id).filter(|id| *id > max_id),
            Parsed::Many(ids) => ids.iter().copied().find(|id| *id > max_id),
        };
        if let Some(id) = above {
            return Err(format!("invalid id: expected 0..={max_id}, found {id}"));
        }
    }
    Ok(parsed)
}

/// Decimal digits only, 0 ..= `max` (leading zeros allowed).
fn parse_decimal(text: &[u8], max: u64) -> Result<u64, String> {
    let mut value: u64 = 0;
    for &byte in text {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return Err(not_an_id(text, max));
        }
        value = match value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit)))
        {
            Some(v) if v <= max => v,
            _ => return Err(not_an_id(text, max)),
        };
    }
    Ok(value)
}

/// The message for a value that is not an ID, with at most 40 characters of it.
fn not_an_id(text: &[u8], max: u64) -> String {
    let shown = String::from_utf8_lossy(&text[..text.len().min(40)]);
    let more = if text.len() > 40 { "…" } else { "" };
    format!("invalid id: expected a decimal 0..={max}, found {shown:?}{more}")
}

/// A JSON line: an object with `"id"` (a string or a number) and/or `"ids"` (an array of them);
/// other fields are ignored.
#[derive(Deserialize)]
struct JsonLine {
    // Present means an id: `null` is refused, not taken for a missing field.
    #[serde(default, deserialize_with = "present")]
    id: Option<JsonId>,
    #[serde(default, deserialize_with = "present")]
    ids: Option<JsonIds>,
}

fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

fn parse_json(line: &[u8]) -> Result<Parsed, String> {
    let parsed: JsonLine = serde_json::from_slice(line).map_err(|e| {
        // serde_json's own words ("invalid id ... at line 1 column 9"), minus the line: a line
        // of ours is always one line.
        let text = e.to_string();
        match text.rsplit_once(" at line 1 column ") {
            Some((message, column)) => format!("{message} (column {column})"),
            None => text,
        }
    })?;
    match (parsed.id, parsed.ids) {
        (None, None) => Err("a JSON line needs an \"id\" or an \"ids\" field".into()),
        (Some(JsonId(id)), None) => Ok(Parsed::One(id)),
        (id, Some(JsonIds(mut ids))) => {
            if let Some(JsonId(id)) = id {
                ids.insert(0, id);
            }
            Ok(Parsed::Many(ids))
        }
    }
}

/// An ID in JSON: a decimal string (as the service prints them) or a non-negative integer.
struct JsonId(u64);

impl<'de> Deserialize<'de> for JsonId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(IdVisitor).map(JsonId)
    }
}

struct IdVisitor;

impl Visitor<'_> for IdVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an id: a decimal string or an integer, 0..={MAX_ID}")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        if value <= MAX_ID {
            Ok(value)
        } else {
            Err(E::custom(format!(
                "invalid id: expected 0..={MAX_ID}, found {value}"
            )))
        }
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
        u64::try_from(value)
            .map_err(|_| E::custom(format!("invalid id: expected 0..={MAX_ID}, found {value}")))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<u64, E> {
        Err(E::custom(format!(
            "invalid id: expected a whole number 0..={MAX_ID}, found {value}"
        )))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<u64, E> {
        parse_decimal(text.as_bytes(), MAX_ID).map_err(E::custom)
    }
}

/// An `"ids"` array.
struct JsonIds(Vec<u64>);

impl<'de> Deserialize<'de> for JsonIds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Ids;
        impl<'de> Visitor<'de> for Ids {
            type Value = Vec<u64>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of ids")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
                // Never trust a claimed length: grow as the elements come.
                let mut ids = Vec::new();
                while let Some(JsonId(id)) = seq.next_element()? {
                    ids.push(id);
                }
                Ok(ids)
            }
        }
        deserializer.deserialize_seq(Ids).map(JsonIds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> Parsed {
        parse_line(line.as_bytes(), MAX_ID).unwrap()
    }

    fn err(line: &str) -> String {
        parse_line(line.as_bytes(), MAX_ID).unwrap_err()
    }

    #[test]
    fn decimal_lines() {
        assert_eq!(ok("1724551110457221119"), Parsed::One(1724551110457221119));
        assert_eq!(ok("  42\r"), Parsed::One(42));
        assert_eq!(ok("0"), Parsed::One(0));
        assert_eq!(ok("0009"), Parsed::One(9));
        assert_eq!(ok("9223372036854775807"), Parsed::One(MAX_ID));
        assert_eq!(ok(""), Parsed::Blank);
        assert_eq!(ok(" \t\r"), Parsed::Blank);
        for bad in [
            "9223372036854775808",
            "18446744073709551616",
            "-1",
            "+1",
            "1 2",
            "12a",
            "0x10",
        ] {
            let message = err(bad);
            assert!(
                message.starts_with("invalid id: expected a decimal 0..=9223372036854775807"),
                "{bad}: {message}"
            );
            assert!(message.contains(bad), "{bad}: {message}");
        }
        let long = "7".repeat(100);
        assert!(err(&long).ends_with("\"…"), "{}", err(&long));
    }

    #[test]
    fn json_lines() {
        assert_eq!(
            ok(r#"{"id":"1724551110457221119"}"#),
            Parsed::One(1724551110457221119)
        );
        assert_eq!(ok(r#"{"id":17}"#), Parsed::One(17));
        assert_eq!(
            ok(r#"{"id":"5","timestamp_ms":1,"time":"x","worker_id":3}"#),
            Parsed::One(5)
        );
        assert_eq!(ok(r#"{"ids":["1",2,"3"]}"#), Parsed::Many(vec![1, 2, 3]));
        assert_eq!(ok(r#"{"ids":[]}"#), Parsed::Many(vec![]));
        assert_eq!(ok(r#"{"id":"9","ids":["1"]}"#), Parsed::Many(vec![9, 1]));
        assert_eq!(
            err(r#"{"idx":"1"}"#),
            "a JSON line needs an \"id\" or an \"ids\" field"
        );
        assert!(
            err(r#"{"id":-1}"#).contains("found -1"),
            "{}",
            err(r#"{"id":-1}"#)
        );
        assert!(err(r#"{"id":1.5}"#).contains("whole number"));
        assert!(err(r#"{"id":"x1"}"#).contains("\"x1\""));
        assert!(err(r#"{"id":9223372036854775808}"#).contains("found 9223372036854775808"));
        assert!(
            err(r#"{"id":null}"#).contains("an id"),
            "{}",
            err(r#"{"id":null}"#)
        );
        assert!(err(r#"{"ids":"1"}"#).contains("array"));
        assert!(
            err(r#"{"ids":[1,"#).contains("EOF"),
            "{}",
            err(r#"{"ids":[1,"#)
        );
        assert!(err(r#"{"id":"1"} trailing"#).contains("trailing"));
        assert!(err("{").contains("column"), "{}", err("{"));
    }

    #[test]
    fn ids_above_the_layouts_largest_are_invalid() {
        let js = (1u64 << 53) - 1;
        let parse = |line: &str| parse_line(line.as_bytes(), js);
        assert_eq!(parse("9007199254740991"), Ok(Parsed::One(js)));
        assert_eq!(
            parse("9007199254740992").unwrap_err(),
            "invalid id: expected a decimal 0..=9007199254740991, found \"9007199254740992\""
        );
        assert_eq!(
            parse(r#"{"id":9007199254740992}"#).unwrap_err(),
            "invalid id: expected 0..=9007199254740991, found 9007199254740992"
        );
        assert_eq!(
            parse(r#"{"ids":["1","9223372036854775807"]}"#).unwrap_err(),
            "invalid id: expected 0..=9007199254740991, found 9223372036854775807"
        );
        assert_eq!(
            parse(r#"{"ids":[1,"9007199254740991"]}"#),
            Ok(Parsed::Many(vec![1, js]))
        );
    }
}
