//! What each connection measures, and the live counters the progress line and the request budget
//! share.

use crate::config::MAX_TIMEOUT;
use hdrhistogram::Histogram;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The most distinct error kinds a report names; any further kind is counted as [`OTHER_KIND`].
pub(crate) const MAX_ERROR_KINDS: usize = 16;
/// The kind under which errors beyond the first [`MAX_ERROR_KINDS`] kinds are counted.
pub(crate) const OTHER_KIND: &str = "other";

/// Error counts by kind, holding at most [`MAX_ERROR_KINDS`] kinds plus [`OTHER_KIND`], so a
/// server answering with ever-new status codes cannot grow it without bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ErrorCounts {
    /// Count per kind, sorted by kind for a stable report.
    counts: BTreeMap<Cow<'static, str>, u64>,
}

impl ErrorCounts {
    /// Adds `count` errors of `kind`.
    pub(crate) fn add(&mut self, kind: Cow<'static, str>, count: u64) {
        if let Some(total) = self.counts.get_mut(&kind) {
            *total = total.saturating_add(count);
            return;
        }
        let named = self.counts.len() - usize::from(self.counts.contains_key(OTHER_KIND));
        let key = if named < MAX_ERROR_KINDS {
            kind
        } else {
            Cow::Borrowed(OTHER_KIND)
        };
        let total = self.counts.entry(key).or_default();
        *total = total.saturating_add(count);
    }

    /// Adds every count of `other`.
    pub(crate) fn merge(&mut self, other: ErrorCounts) {
        for (kind, count) in other.counts {
            self.add(kind, count);
        }
    }

    /// The counts as owned strings, for the report.
    pub(crate) fn into_map(self) -> BTreeMap<String, u64> {
        self.counts
            .into_iter()
            .map(|(kind, count)| (kind.into_owned(), count))
            .collect()
    }
}

/// What one connection measured during the measurement phase.
#[derive(Debug, Clone)]
pub(crate) struct Stats {
    /// Requests answered with status 200 and the right IDs.
    pub(crate) ok: u64,
    /// Requests sent that failed: a bad status, a bad body, a timeout, a lost connection.
    pub(crate) failed: u64,
    /// IDs received in valid answers.
    pub(crate) ids: u64,
    /// Every error by kind: failed requests and failed connection attempts.
    pub(crate) errors: ErrorCounts,
    /// Latency of successful requests, in microseconds.
    pub(crate) latency_us: Histogram<u64>,
}

impl Stats {
    /// Empty stats with a histogram from 1 µs to [`MAX_TIMEOUT`] at 3 significant digits.
    pub(crate) fn new() -> Stats {
        let max_us = u64::try_from(MAX_TIMEOUT.as_micros()).unwrap_or(u64::MAX);
        Stats {
            ok: 0,
            failed: 0,
            ids: 0,
            errors: ErrorCounts::default(),
            // Constant, valid bounds (1 <= 60e6, 3 digits): this cannot fail.
            latency_us: Histogram::new_with_bounds(1, max_us, 3)
                .expect("constant histogram bounds are valid"),
        }
    }

    /// Records one successful request.
    pub(crate) fn record_ok(&mut self, ids: u64, latency: Duration) {
        self.ok += 1;
        self.ids += ids;
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_us.saturating_record(micros);
    }

    /// Records one failed request.
    pub(crate) fn record_failed(&mut self, kind: Cow<'static, str>) {
        self.failed += 1;
        self.errors.add(kind, 1);
    }

    /// Records one failed connection attempt (not a request).
    pub(crate) fn record_connect_error(&mut self, kind: Cow<'static, str>) {
        self.errors.add(kind, 1);
    }

    /// Adds everything `other` measured.
    pub(crate) fn merge(&mut self, other: Stats) {
        self.ok += other.ok;
        self.failed += other.failed;
        self.ids += other.ids;
        self.errors.merge(other.errors);
        // Both histograms have the same bounds, so every value of `other` fits; `add` only fails
        // when it would not.
        let _ = self.latency_us.add(&other.latency_us);
    }
}

/// Counters every connection bumps as it goes, read once a second by the progress line.
#[derive(Debug, Default)]
pub(crate) struct Live {
    /// Successful measured requests so far.
    pub(crate) ok: AtomicU64,
    /// IDs received in measured requests so far.
    pub(crate) ids: AtomicU64,
    /// Errors counted so far.
    pub(crate) errors: AtomicU64,
}

impl Live {
    /// Counts a successful request.
    pub(crate) fn add_ok(&self, ids: u64) {
        self.ok.fetch_add(1, Ordering::Relaxed);
        self.ids.fetch_add(ids, Ordering::Relaxed);
    }

    /// Counts an error.
    pub(crate) fn add_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads `(ok, ids, errors)`.
    pub(crate) fn read(&self) -> (u64, u64, u64) {
        (
            self.ok.load(Ordering::Relaxed),
            self.ids.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }
}
