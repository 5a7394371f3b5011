//! Time windows for ID ranges (`GET /v1/range`, gRPC `Range`, `snowflake range`): bounds given
//! as Unix milliseconds or RFC 3339 text, checked against the layout's lifetime.

use snowflake_core::{Error, Field, IdRange, Layout};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The longest piece of a bound repeated in an error message.
const MAX_ECHO_CHARS: usize = 40;

/// The smallest and largest ID any node could issue from `from` to `to` (both included), each
/// bound decimal Unix milliseconds or an RFC 3339 time. A bound that is neither, lies outside
/// the layout's lifetime (its epoch to its last millisecond), or a `from` after `to` is an error
/// naming the bound.
///
/// ```
/// use snowflake_core::Layout;
/// use snowflake_server::window::range;
/// let by_ms = range(&Layout::TWITTER, "1700000000000", "1700000000999")?;
/// let by_time = range(&Layout::TWITTER, "2023-11-14T22:13:20Z", "2023-11-14T23:13:20.999+01:00")?;
/// assert_eq!(by_ms, by_time);
/// assert_eq!(by_ms.min_id.as_u64(), 1_724_551_110_456_246_272);
/// let err = range(&Layout::TWITTER, "2000-01-01T00:00:00Z", "1700000000000").unwrap_err();
/// assert_eq!(
///     err,
///     "invalid from (unix ms): expected 1288834974657..=3487858230208, found 946684800000 \
///      (2000-01-01T00:00:00Z)"
/// );
/// # Ok::<(), String>(())
/// ```
pub fn range(layout: &Layout, from: &str, to: &str) -> Result<IdRange, String> {
    let from_ms = bound(layout, Field::From, from)?;
    let to_ms = bound(layout, Field::To, to)?;
    layout.id_range(from_ms, to_ms).map_err(|e| e.to_string())
}

/// [`range`] for bounds already in Unix milliseconds (gRPC's `int64`s; a negative one is out of
/// range like any other bound before the epoch).
pub fn range_ms(layout: &Layout, from_ms: i64, to_ms: i64) -> Result<IdRange, String> {
    let unsigned = |field: Field, ms: i64| {
        u64::try_from(ms).map_err(|_| {
            let (min, max) = layout.range(field);
            Error::OutOfRange {
                field,
                found: ms.to_string(),
                min,
                max,
            }
            .to_string()
        })
    };
    let from_ms = unsigned(Field::From, from_ms)?;
    let to_ms = unsigned(Field::To, to_ms)?;
    layout.id_range(from_ms, to_ms).map_err(|e| e.to_string())
}

/// One bound, in Unix milliseconds within the layout's lifetime.
fn bound(layout: &Layout, field: Field, text: &str) -> Result<u64, String> {
    let text = text.trim();
    let decimal = text.strip_prefix('-').unwrap_or(text);
    if !decimal.is_empty() && decimal.bytes().all(|b| b.is_ascii_digit()) {
        return layout.parse(field, text).map_err(|e| e.to_string());
    }
    let Ok(time) = OffsetDateTime::parse(text, &Rfc3339) else {
        return Err(format!(
            "invalid {}: expected unix milliseconds or an RFC 3339 time such as \
             2024-05-01T00:00:00Z, found {:?}",
            field_word(field),
            echo(text)
        ));
    };
    // Whole milliseconds: a fraction of one is dropped (IDs carry milliseconds only).
    let ms = time.unix_timestamp_nanos().div_euclid(1_000_000);
    let (min, max) = layout.range(field);
    match u64::try_from(ms) {
        Ok(ms) if (min..=max).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "{} ({})",
            Error::OutOfRange {
                field,
                found: ms.to_string(),
                min,
                max,
            },
            echo(text)
        )),
    }
}

/// The bound's name alone, as the query parameter and the flag spell it.
fn field_word(field: Field) -> &'static str {
    match field {
        Field::From => "from",
        Field::To => "to",
        other => other.name(),
    }
}

/// Cuts user input for an error message.
fn echo(text: &str) -> String {
    if text.chars().count() <= MAX_ECHO_CHARS {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(MAX_ECHO_CHARS).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_700_000_000_000;

    #[test]
    fn bounds_as_milliseconds_or_rfc_3339_agree() {
        let layout = Layout::JS_SAFE;
        let expected = layout.id_range(T, T + 1000).unwrap();
        for (from, to) in [
            ("1700000000000", "1700000001000"),
            ("2023-11-14T22:13:20Z", "2023-11-14T22:13:21Z"),
            ("2023-11-14t22:13:20.000z", "2023-11-14T22:13:21.000999Z"),
            ("2023-11-15T00:13:20+02:00", "2023-11-14T17:13:21-05:00"),
            (" 1700000000000 ", "2023-11-14T22:13:21.0009Z"),
        ] {
            assert_eq!(range(&layout, from, to), Ok(expected), "{from} {to}");
        }
        assert_eq!(
            range_ms(&layout, 1_700_000_000_000, 1_700_000_001_000),
            Ok(expected)
        );
    }

    #[test]
    fn bad_bounds_are_named() {
        let layout = Layout::TWITTER;
        assert_eq!(
            range(&layout, "yesterday", "1700000000000").unwrap_err(),
            "invalid from: expected unix milliseconds or an RFC 3339 time such as \
             2024-05-01T00:00:00Z, found \"yesterday\""
        );
        assert!(
            range(&layout, "1700000000000", "2023-11-14")
                .unwrap_err()
                .starts_with("invalid to: expected unix milliseconds or an RFC 3339 time")
        );
        assert_eq!(
            range(&layout, "-5", "1700000000000").unwrap_err(),
            "invalid from (unix ms): expected 1288834974657..=3487858230208, found -5"
        );
        assert_eq!(
            range_ms(&layout, -5, 1_700_000_000_000).unwrap_err(),
            "invalid from (unix ms): expected 1288834974657..=3487858230208, found -5"
        );
        assert_eq!(
            range(&layout, "1700000000000", "99999999999999999999").unwrap_err(),
            "invalid to (unix ms): expected 1288834974657..=3487858230208, found \
             99999999999999999999"
        );
        assert_eq!(
            range(&layout, "1700000000000", "2090-01-01T00:00:00Z").unwrap_err(),
            "invalid to (unix ms): expected 1288834974657..=3487858230208, found 3786912000000 \
             (2090-01-01T00:00:00Z)"
        );
        assert_eq!(
            range(&layout, "1960-01-01T00:00:00Z", "1700000000000").unwrap_err(),
            "invalid from (unix ms): expected 1288834974657..=3487858230208, found -315619200000 \
             (1960-01-01T00:00:00Z)"
        );
        assert_eq!(
            range_ms(&layout, 1_700_000_000_001, 1_700_000_000_000).unwrap_err(),
            "invalid range: from 1700000000001 is after to 1700000000000 (unix ms)"
        );
        let long = "x".repeat(10_000);
        assert!(range(&layout, &long, "1").unwrap_err().len() < 200);
    }
}
