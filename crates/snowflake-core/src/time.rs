//! Unix milliseconds to ISO-8601 UTC text and to `SystemTime`.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Formats Unix milliseconds as ISO-8601 UTC with milliseconds and `Z`,
/// e.g. `2023-11-14T22:13:20.000Z`.
///
/// ```
/// assert_eq!(snowflake_core::format_unix_ms(1_288_834_974_657), "2010-11-04T01:42:54.657Z");
/// ```
pub fn format_unix_ms(unix_ms: u64) -> String {
    let mut out = String::with_capacity(24);
    write_unix_ms(&mut out, unix_ms);
    out
}

/// Appends [`format_unix_ms`]'s text to `out`, without allocating a new string.
pub fn write_unix_ms(out: &mut String, unix_ms: u64) {
    let millis = unix_ms % 1000;
    let secs = unix_ms / 1000;
    let days = secs / 86_400;
    let secs_of_day = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        secs_of_day / 3600,
        secs_of_day % 3600 / 60,
        secs_of_day % 60
    );
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day); after H. Hinnant's
/// `civil_from_days`, for non-negative day counts.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Unix milliseconds as a `SystemTime`, or `None` if the platform cannot represent it.
pub fn unix_ms_to_system_time(unix_ms: u64) -> Option<SystemTime> {
    UNIX_EPOCH.checked_add(Duration::from_millis(unix_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(format_unix_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_unix_ms(1_700_000_000_000),
            "2023-11-14T22:13:20.000Z"
        );
        assert_eq!(
            format_unix_ms(1_288_834_974_657),
            "2010-11-04T01:42:54.657Z"
        );
        assert_eq!(
            format_unix_ms(1_288_834_974_657 + (1 << 41) - 1),
            "2080-07-10T17:30:30.208Z"
        );
        assert_eq!(format_unix_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            format_unix_ms(4_107_542_399_999),
            "2100-02-28T23:59:59.999Z"
        );
        assert_eq!(
            format_unix_ms(4_107_542_400_000),
            "2100-03-01T00:00:00.000Z"
        );
    }

    #[test]
    fn every_day_of_four_centuries_round_trips_through_the_calendar() {
        // Walk day by day and check the calendar advances by exactly one day each time.
        let (mut y, mut m, mut d) = civil_from_days(0);
        for days in 1..146_097 {
            let next = civil_from_days(days);
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let month_len = match m {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            let expected = if d < month_len {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
            assert_eq!(next, expected, "day {days}");
            (y, m, d) = next;
        }
    }
}
