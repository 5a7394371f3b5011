//! `snowflake_request_duration_seconds`: how long requests take, per protocol and route, in a
//! histogram whose buckets resolve 10 µs to 1 s.
//!
//! Lock-free on the hot path: each (protocol, route) has its own [`Histogram`], fetched once by
//! the front end (a route's closure, a connection's session) and then observed with two atomic
//! adds; only scrapes walk the list of histograms.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The buckets' upper bounds in nanoseconds: 1-2.5-5 steps from 10 µs to 1 s (a request that
/// takes longer lands in `+Inf`).
const BOUNDS_NS: [u64; 16] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

/// One (protocol, route)'s histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative), the last one being `+Inf`.
    buckets: [AtomicU64; BOUNDS_NS.len() + 1],
    /// The sum of every observation, in nanoseconds (wraps after 584 years of request time).
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Records a request that took `elapsed`.
    pub fn observe(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_NS.partition_point(|&bound| bound < ns);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Records `n` requests that each took `elapsed` (a pipelined batch whose answers were all
    /// written at once).
    pub fn observe_n(&self, elapsed: Duration, n: u64) {
        if n == 0 {
            return;
        }
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_NS.partition_point(|&bound| bound < ns);
        self.buckets[bucket].fetch_add(n, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(ns.saturating_mul(n), Ordering::Relaxed);
    }

    /// The buckets as the encoder wants them: (upper bound in seconds, count in that bucket
    /// alone), the sum in seconds, and the count.
    fn read(&self) -> (Vec<(f64, u64)>, f64, u64) {
        let mut buckets = Vec::with_capacity(BOUNDS_NS.len() + 1);
        let mut count = 0u64;
        for (i, bucket) in self.buckets.iter().enumerate() {
            let n = bucket.load(Ordering::Relaxed);
            count = count.wrapping_add(n);
            let bound = BOUNDS_NS
                .get(i)
                .map_or(f64::INFINITY, |&ns| ns as f64 / 1e9);
            buckets.push((bound, n));
        }
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        (buckets, sum, count)
    }
}

/// Every (protocol, route) histogram made so far; the set is bounded by the front ends' fixed
/// route names.
#[derive(Debug, Default)]
pub struct Latencies {
    histograms: Mutex<Vec<(&'static str, &'static str, Arc<Histogram>)>>,
}

impl Latencies {
    /// The histogram of `route` over `protocol`, made on first use.
    pub fn histogram(&self, protocol: &'static str, route: &'static str) -> Arc<Histogram> {
        let mut histograms = self
            .histograms
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some((_, _, h)) = histograms
            .iter()
            .find(|(p, r, _)| *p == protocol && *r == route)
        {
            return Arc::clone(h);
        }
        let h = Arc::new(Histogram::default());
        histograms.push((protocol, route, Arc::clone(&h)));
        h
    }
}

/// One connection's histograms by route, so that a connection's requests observe their
/// latency without taking the shared list's lock.
#[derive(Debug)]
pub struct RouteLatencies {
    protocol: &'static str,
    shared: Arc<Latencies>,
    routes: Vec<(&'static str, Arc<Histogram>)>,
}

impl RouteLatencies {
    pub(crate) fn new(protocol: &'static str, shared: Arc<Latencies>) -> RouteLatencies {
        RouteLatencies {
            protocol,
            shared,
            routes: Vec::new(),
        }
    }

    /// The histogram of `route`.
    pub fn get(&mut self, route: &'static str) -> &Histogram {
        let i = match self.routes.iter().position(|(r, _)| *r == route) {
            Some(i) => i,
            None => {
                let h = self.shared.histogram(self.protocol, route);
                self.routes.push((route, h));
                self.routes.len() - 1
            }
        };
        &self.routes[i].1
    }
}

/// Encodes every histogram of a [`Latencies`] at scrape time.
#[derive(Debug)]
pub(crate) struct LatencyCollector(pub Arc<Latencies>);

/// One histogram as the encoder's metric.
struct Encoded {
    buckets: Vec<(f64, u64)>,
    sum: f64,
    count: u64,
}

impl EncodeMetric for Encoded {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl Collector for LatencyCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let histograms: Vec<_> = self
            .0
            .histograms
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone();
        if histograms.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "request_duration_seconds",
            "How long requests took in the service, by protocol and route (RESP: from reading a pipelined batch to writing its answers)",
            None,
            MetricType::Histogram,
        )?;
        for (protocol, route, histogram) in histograms {
            let (buckets, sum, count) = histogram.read();
            let labels = [("protocol", protocol), ("route", route)];
            Encoded {
                buckets,
                sum,
                count,
            }
            .encode(family.encode_family(&labels.as_slice())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_at_or_above_them() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(3));
        h.observe(Duration::from_micros(10));
        h.observe(Duration::from_micros(11));
        h.observe(Duration::from_millis(999));
        h.observe(Duration::from_secs(5));
        let (buckets, sum, count) = h.read();
        assert_eq!(count, 5);
        assert_eq!(buckets[0], (1e-5, 2));
        assert_eq!(buckets[1], (2.5e-5, 1));
        assert_eq!(buckets[15], (1.0, 1));
        assert_eq!(buckets[16].1, 1);
        assert!(buckets[16].0.is_infinite());
        assert!((sum - 5.999_024).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn a_batch_counts_each_of_its_requests() {
        let h = Histogram::default();
        h.observe_n(Duration::from_micros(30), 16);
        h.observe_n(Duration::from_micros(30), 0);
        assert_eq!(h.read().2, 16);
    }

    #[test]
    fn one_histogram_per_protocol_and_route() {
        let l = Latencies::default();
        let a = l.histogram("http", "/v1/id");
        let b = l.histogram("http", "/v1/id");
        let c = l.histogram("grpc", "/v1/id");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
    }
}
