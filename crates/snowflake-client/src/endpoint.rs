//! One node the client can ask: its gRPC channel, and whether (and until when) it is skipped.

use crate::Error;
use crate::tls::Tls;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A node's address as given (`HOST:PORT`, or a `http://`/`https://` URL).
#[derive(Debug)]
pub(crate) struct Node {
    /// As the caller wrote it, for messages and events.
    pub(crate) name: String,
    pub(crate) channel: Channel,
    /// Its ID layout, once its `GetInfo` said which (and it agreed with the client's).
    pub(crate) layout: std::sync::OnceLock<snowflake_core::Layout>,
    health: Mutex<Health>,
}

#[derive(Debug, Default)]
struct Health {
    /// Skipped until then (`None`: usable).
    down_until: Option<Instant>,
    /// Failures in a row, for the backoff.
    failures: u32,
    /// The last failure, for the error when every node failed.
    last_error: Option<String>,
}

/// What the client does between attempts at a failing node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    pub(crate) initial: Duration,
    pub(crate) max: Duration,
}

impl Backoff {
    /// The pause after `failures` failures in a row: doubling from `initial`, at most `max`.
    pub(crate) fn after(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(20);
        self.initial
            .saturating_mul(1 << doublings)
            .min(self.max)
            .max(self.initial.min(self.max))
    }
}

/// The host part of `HOST:PORT` or of a URL's authority (brackets of an IPv6 address removed).
pub(crate) fn host_of(authority: &str) -> &str {
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// `HOST:PORT` → the URL of the channel (`https` with TLS), checked.
pub(crate) fn url_of(endpoint: &str, tls: bool) -> Result<(String, String), Error> {
    let bad = |why: &str| {
        Error::Config(format!(
            "invalid endpoint {endpoint:?}: {why} (expected HOST:PORT, e.g. 127.0.0.1:50051)"
        ))
    };
    let (scheme, authority) = match endpoint.split_once("://") {
        Some((scheme @ ("http" | "https"), rest)) => (scheme, rest.trim_end_matches('/')),
        Some((other, _)) => return Err(bad(&format!("unknown scheme {other:?}"))),
        None => (if tls { "https" } else { "http" }, endpoint),
    };
    if scheme == "https" && !tls {
        return Err(bad(
            "an https:// endpoint needs TLS settings (the CA to trust)",
        ));
    }
    if scheme == "http" && tls {
        return Err(bad("an http:// endpoint with TLS settings"));
    }
    if authority.contains('/') {
        return Err(bad("a path is not allowed"));
    }
    let Some((host, port)) = authority.rsplit_once(':') else {
        return Err(bad("no port"));
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(bad(&format!("port {port:?} is not in 1..=65535"))),
    }
    Ok((
        format!("{scheme}://{authority}"),
        host_of(authority).to_owned(),
    ))
}

impl Node {
    /// A node whose channel connects on first use (and reconnects after failures by itself).
    pub(crate) fn new(
        endpoint: &str,
        tls: Option<&Tls>,
        connect_timeout: Duration,
    ) -> Result<Node, Error> {
        let (url, host) = url_of(endpoint, tls.is_some())?;
        let mut ep = tonic::transport::Endpoint::from_shared(url.clone())
            .map_err(|e| Error::Config(format!("invalid endpoint {endpoint:?}: {e}")))?
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            // A half-open connection to a frozen or vanished node is noticed.
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(5));
        if let Some(tls) = tls {
            ep = ep
                .tls_config(tls.tonic_config(&host))
                .map_err(|e| Error::Config(format!("TLS for {endpoint:?}: {e}")))?;
        }
        Ok(Node {
            name: endpoint.to_owned(),
            channel: ep.connect_lazy(),
            layout: std::sync::OnceLock::new(),
            health: Mutex::new(Health::default()),
        })
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        // A panic while holding it leaves plain data behind: still usable.
        self.health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// When the node may be asked again (`None`: now).
    pub(crate) fn down_until(&self, now: Instant) -> Option<Instant> {
        self.health().down_until.filter(|t| *t > now)
    }

    /// A success: usable again, backoff reset. True when it had been down.
    pub(crate) fn succeeded(&self) -> bool {
        let mut h = self.health();
        let was_down = h.failures > 0;
        *h = Health::default();
        was_down
    }

    /// A failure: skipped for the backoff, or for as long as the node asked (`retry-after`),
    /// whichever is longer. Returns the pause.
    pub(crate) fn failed(
        &self,
        backoff: &Backoff,
        retry_after: Option<Duration>,
        error: String,
    ) -> Duration {
        let mut h = self.health();
        h.failures = h.failures.saturating_add(1);
        let pause = backoff
            .after(h.failures)
            .max(retry_after.unwrap_or_default().min(backoff.max));
        h.down_until = Some(Instant::now() + pause);
        h.last_error = Some(error);
        pause
    }

    pub(crate) fn last_error(&self) -> Option<String> {
        self.health().last_error.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_maximum() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
        };
        let ms = |n| b.after(n).as_millis();
        assert_eq!(
            [ms(1), ms(2), ms(3), ms(5), ms(6), ms(100)],
            [100, 200, 400, 1600, 2000, 2000]
        );
    }

    #[test]
    fn endpoints_are_checked() {
        assert_eq!(
            url_of("127.0.0.1:50051", false).unwrap(),
            ("http://127.0.0.1:50051".into(), "127.0.0.1".into())
        );
        assert_eq!(
            url_of("ids.example:443", true).unwrap(),
            ("https://ids.example:443".into(), "ids.example".into())
        );
        assert_eq!(
            url_of("https://[::1]:8443/", true).unwrap(),
            ("https://[::1]:8443".into(), "::1".into())
        );
        for (bad, why) in [
            ("127.0.0.1", "no port"),
            (":50051", "no host"),
            ("host:0", "port \"0\" is not in 1..=65535"),
            ("host:99999", "is not in 1..=65535"),
            ("ftp://host:1", "unknown scheme"),
            ("https://host:1", "needs TLS settings"),
            ("host:1/path", "a path is not allowed"),
        ] {
            let err = url_of(bad, false).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains("expected HOST:PORT"), "{err}");
        }
    }
}
