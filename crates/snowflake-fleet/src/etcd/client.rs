//! A small etcd v3 client over tonic: the calls the lease protocol needs, each bounded by a
//! timeout, spread over every configured member.
//!
//! Why not the `etcd-client` crate: its build script runs `protoc`, which a machine with only
//! the Rust toolchain does not have, and `cargo run --release -- serve` must build there. The
//! API subset in `proto/etcd/rpc.proto` is compiled by `protox` (pure Rust) like our own.
//!
//! Failover is by hand and simple: one lazily connected channel per member; a call that fails
//! or times out moves the client to the next member for the following call. tonic's balanced
//! channel is not used because a member that is frozen (not refusing, just silent) would keep
//! receiving a share of the calls.

use super::pb;
use super::pb::auth_client::AuthClient;
use super::pb::kv_client::KvClient;
use super::pb::lease_client::LeaseClient;
use super::pb::watch_client::WatchClient;
use crate::config::{ClientTls, EtcdAuth};
use std::sync::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// The gRPC metadata by which a call requires the member to have a leader (etcd's
/// `rpctypes.MetadataRequireLeaderKey`).
pub const REQUIRE_LEADER_KEY: &str = "hasleader";

/// What etcd answers when a member has no leader (`rpctypes.ErrGRPCNoLeader`).
const NO_LEADER: &str = "etcdserver: no leader";

/// A member's channel with the auth token (if any) added to every call.
pub type AuthedChannel = InterceptedService<Channel, TokenInterceptor>;

/// Adds etcd's auth token as the `token` metadata of a call.
#[derive(Debug, Clone)]
pub struct TokenInterceptor(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for TokenInterceptor {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().insert("token", token.clone());
        }
        Ok(request)
    }
}

/// Why an etcd call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EtcdError {
    /// No answer within the call's time limit.
    #[error("etcd at {endpoint} did not answer within {} ms", timeout.as_millis())]
    Timeout {
        /// The member asked.
        endpoint: String,
        /// The time limit.
        timeout: Duration,
    },
    /// The member answered with an error, or could not be reached.
    #[error("etcd at {endpoint}: {message}")]
    Call {
        /// The member asked.
        endpoint: String,
        /// What went wrong.
        message: String,
    },
}

impl EtcdError {
    /// The member said it has no leader: it is cut off from the quorum (or an election is
    /// under way), and what it serves may be stale.
    pub fn is_no_leader(&self) -> bool {
        matches!(self, EtcdError::Call { message, .. } if message.contains(NO_LEADER))
    }

    /// The member that answered (or did not).
    pub fn endpoint(&self) -> &str {
        match self {
            EtcdError::Timeout { endpoint, .. } | EtcdError::Call { endpoint, .. } => endpoint,
        }
    }
}

/// One etcd member.
#[derive(Debug)]
struct Member {
    url: String,
    channel: Channel,
}

/// A client for the etcd members of `--etcd-endpoints`.
#[derive(Debug)]
pub struct EtcdClient {
    members: Vec<Member>,
    /// The member the next call goes to.
    current: AtomicUsize,
    /// etcd's user authentication, and the token it gave (cleared when etcd says it is no
    /// longer valid: a restarted member forgets its tokens, and "simple" tokens expire).
    auth: Option<(EtcdAuth, RwLock<Option<MetadataValue<Ascii>>>)>,
}

/// A keep-alive stream: send one request, read one answer.
#[derive(Debug)]
pub struct KeepAliveStream {
    endpoint: String,
    requests: mpsc::Sender<pb::LeaseKeepAliveRequest>,
    responses: tonic::Streaming<pb::LeaseKeepAliveResponse>,
}

impl EtcdClient {
    /// A client for `urls` (`http://host:port`, or `https://` with `tls`), authenticating as
    /// `auth` when given; connects lazily, so this never waits.
    pub fn new(
        urls: &[String],
        tls: Option<&ClientTls>,
        auth: Option<&EtcdAuth>,
        connect_timeout: Duration,
    ) -> Result<EtcdClient, EtcdError> {
        let tls_config = tls.map(|tls| {
            let mut config =
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key.expose()));
            }
            config
        });
        let members = urls
            .iter()
            .map(|url| {
                let mut endpoint =
                    Endpoint::from_shared(url.clone()).map_err(|e| EtcdError::Call {
                        endpoint: url.clone(),
                        message: format!("invalid endpoint URL: {e}"),
                    })?;
                if let Some(config) = &tls_config {
                    endpoint =
                        endpoint
                            .tls_config(config.clone())
                            .map_err(|e| EtcdError::Call {
                                endpoint: url.clone(),
                                message: format!("cannot set up TLS: {e}"),
                            })?;
                }
                let endpoint = endpoint
                    .connect_timeout(connect_timeout)
                    .tcp_nodelay(true)
                    .http2_keep_alive_interval(Duration::from_secs(5))
                    .keep_alive_timeout(Duration::from_secs(5))
                    .keep_alive_while_idle(true);
                Ok(Member {
                    url: url.clone(),
                    channel: endpoint.connect_lazy(),
                })
            })
            .collect::<Result<Vec<_>, EtcdError>>()?;
        Ok(EtcdClient {
            members,
            current: AtomicUsize::new(0),
            auth: auth.map(|auth| (auth.clone(), RwLock::new(None))),
        })
    }

    /// The token to send to `member`, authenticating first when there is none yet.
    async fn token(
        &self,
        member: &Member,
        timeout: Duration,
    ) -> Result<TokenInterceptor, EtcdError> {
        let Some((auth, token)) = &self.auth else {
            return Ok(TokenInterceptor(None));
        };
        if let Some(token) = token.read().unwrap_or_else(|p| p.into_inner()).clone() {
            return Ok(TokenInterceptor(Some(token)));
        }
        let mut client = AuthClient::new(member.channel.clone());
        let call = client.authenticate(pb::AuthenticateRequest {
            name: auth.user.clone(),
            password: auth.password.expose().to_owned(),
        });
        let answer = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(answer)) => answer.into_inner(),
            Ok(Err(status)) => {
                return Err(EtcdError::Call {
                    endpoint: member.url.clone(),
                    message: format!(
                        "cannot authenticate as etcd user {:?}: {}",
                        auth.user,
                        describe(&status)
                    ),
                });
            }
            Err(_) => {
                return Err(EtcdError::Timeout {
                    endpoint: member.url.clone(),
                    timeout,
                });
            }
        };
        let value =
            MetadataValue::try_from(answer.token.as_str()).map_err(|_| EtcdError::Call {
                endpoint: member.url.clone(),
                message: "etcd answered an auth token that is not ASCII".into(),
            })?;
        *token.write().unwrap_or_else(|p| p.into_inner()) = Some(value.clone());
        tracing::info!(user = %auth.user, endpoint = %member.url, "authenticated to etcd");
        Ok(TokenInterceptor(Some(value)))
    }

    /// After etcd refused our token: authenticate again on the next call.
    fn token_refused(&self, status: &tonic::Status) {
        if let Some((_, token)) = &self.auth
            && (status.code() == tonic::Code::Unauthenticated
                || status.message().contains("invalid auth token")
                || status.message().contains("user name is empty"))
        {
            *token.write().unwrap_or_else(|p| p.into_inner()) = None;
        }
    }

    /// The member the next call goes to.
    fn member(&self) -> (usize, &Member) {
        let index = self.current.load(Ordering::Relaxed) % self.members.len();
        (index, &self.members[index])
    }

    /// After a failure on member `index`, the next call goes to the next member.
    fn failed(&self, index: usize) {
        let _ = self.current.compare_exchange(
            index,
            (index + 1) % self.members.len(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Runs one call against the current member within `timeout`; on failure, moves on to the
    /// next member for the next call.
    async fn call<T, F, Fut>(&self, timeout: Duration, f: F) -> Result<T, EtcdError>
    where
        F: FnOnce(AuthedChannel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let (index, member) = self.member();
        let started = tokio::time::Instant::now();
        let token = match self.token(member, timeout).await {
            Ok(token) => token,
            Err(err) => {
                self.failed(index);
                return Err(err);
            }
        };
        let channel = InterceptedService::new(member.channel.clone(), token);
        let left = timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, f(channel)).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => {
                self.token_refused(&status);
                self.failed(index);
                Err(EtcdError::Call {
                    endpoint: member.url.clone(),
                    message: describe(&status),
                })
            }
            Err(_) => {
                self.failed(index);
                Err(EtcdError::Timeout {
                    endpoint: member.url.clone(),
                    timeout,
                })
            }
        }
    }

    /// Grants a lease of `ttl_secs`; etcd may raise the TTL to its minimum.
    pub async fn grant(
        &self,
        ttl_secs: i64,
        timeout: Duration,
    ) -> Result<pb::LeaseGrantResponse, EtcdError> {
        let response = self
            .call(timeout, |channel| async move {
                LeaseClient::new(channel)
                    .lease_grant(pb::LeaseGrantRequest {
                        ttl: ttl_secs,
                        id: 0,
                    })
                    .await
            })
            .await?;
        if !response.error.is_empty() {
            let (_, member) = self.member();
            return Err(EtcdError::Call {
                endpoint: member.url.clone(),
                message: format!("lease grant refused: {}", response.error),
            });
        }
        Ok(response)
    }

    /// Revokes a lease: every key attached to it is deleted at once.
    pub async fn revoke(&self, lease_id: i64, timeout: Duration) -> Result<(), EtcdError> {
        self.call(timeout, |channel| async move {
            LeaseClient::new(channel)
                .lease_revoke(pb::LeaseRevokeRequest { id: lease_id })
                .await
        })
        .await
        .map(drop)
    }

    /// Runs a transaction.
    pub async fn txn(
        &self,
        request: pb::TxnRequest,
        timeout: Duration,
    ) -> Result<pb::TxnResponse, EtcdError> {
        self.call(timeout, |channel| async move {
            KvClient::new(channel).txn(request).await
        })
        .await
    }

    /// Every key-value under `prefix` (linearizable read).
    pub async fn range_prefix(
        &self,
        prefix: &str,
        timeout: Duration,
    ) -> Result<Vec<pb::KeyValue>, EtcdError> {
        let request = pb::RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            ..Default::default()
        };
        self.call(timeout, |channel| async move {
            KvClient::new(channel).range(request).await
        })
        .await
        .map(|r| r.kvs)
    }

    /// Opens a keep-alive stream on the current member with a first keep-alive for
    /// `lease_id`: the stream and that keep-alive's answer (see [`KeepAliveStream::keep_alive`]).
    ///
    /// The first request is queued before the call starts: etcd sends the response headers
    /// only with its first answer, and tonic returns the stream only once it has the headers.
    pub async fn keep_alive_stream(
        &self,
        lease_id: i64,
        timeout: Duration,
    ) -> Result<(KeepAliveStream, i64), EtcdError> {
        let (requests, receiver) = mpsc::channel(1);
        requests
            .try_send(pb::LeaseKeepAliveRequest { id: lease_id })
            .expect("a new channel has room for one request");
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
        let (_, member) = self.member();
        let started = tokio::time::Instant::now();
        let responses = self
            .call(timeout, |channel| async move {
                LeaseClient::new(channel).lease_keep_alive(stream).await
            })
            .await?;
        let mut stream = KeepAliveStream {
            endpoint: member.url.clone(),
            requests,
            responses,
        };
        let left = timeout.saturating_sub(started.elapsed());
        match stream.answer(lease_id, left).await {
            Ok(ttl) => Ok((stream, ttl)),
            Err(err) => {
                self.stream_failed(&stream);
                Err(err)
            }
        }
    }

    /// The key-value at `key`, if any (linearizable read).
    pub async fn get_key(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<Option<pb::KeyValue>, EtcdError> {
        let request = pb::RangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        };
        self.call(timeout, |channel| async move {
            KvClient::new(channel).range(request).await
        })
        .await
        .map(|r| r.kvs.into_iter().next())
    }

    /// Opens a watch on `key` on the current member, from its current revision on, and waits
    /// (within `timeout`) for etcd to confirm it. Like a keep-alive stream, the request is queued
    /// before the call starts: etcd sends the response headers with its first answer.
    pub async fn watch_key(&self, key: &str, timeout: Duration) -> Result<WatchStream, EtcdError> {
        let (requests, receiver) = mpsc::channel(1);
        requests
            .try_send(pb::WatchRequest {
                request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
                    pb::WatchCreateRequest {
                        key: key.as_bytes().to_vec(),
                        ..Default::default()
                    },
                )),
            })
            .expect("a new channel has room for one request");
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
        let (index, member) = self.member();
        let started = tokio::time::Instant::now();
        let responses = self
            .call(timeout, |channel| async move {
                // etcd's "require leader" (clientv3.WithRequireLeader): a member cut off from
                // the quorum refuses the watch, and cancels it once it has had no leader for a
                // few election timeouts, instead of keeping a silent stream open that can miss
                // a deletion the quorum applied.
                let mut request = tonic::Request::new(stream);
                request
                    .metadata_mut()
                    .insert(REQUIRE_LEADER_KEY, MetadataValue::from_static("true"));
                WatchClient::new(channel).watch(request).await
            })
            .await?;
        let mut watch = WatchStream {
            endpoint: member.url.clone(),
            _requests: requests,
            responses,
        };
        let left = timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, watch.next()).await {
            Ok(Ok(first)) if first.created && !first.canceled => Ok(watch),
            Ok(Ok(first)) => {
                self.failed(index);
                Err(EtcdError::Call {
                    endpoint: member.url.clone(),
                    message: format!("the watch was not created: {}", first.cancel_reason),
                })
            }
            Ok(Err(err)) => {
                self.failed(index);
                Err(err)
            }
            Err(_) => {
                self.failed(index);
                Err(EtcdError::Timeout {
                    endpoint: member.url.clone(),
                    timeout,
                })
            }
        }
    }

    /// After a watch failed (its member has no leader, say): use the next member from now on.
    pub fn watch_failed(&self, watch: &WatchStream) {
        if let Some(index) = self.members.iter().position(|m| m.url == watch.endpoint) {
            self.failed(index);
        }
    }

    /// After a keep-alive stream failed: use the next member from now on.
    pub fn stream_failed(&self, stream: &KeepAliveStream) {
        if let Some(index) = self.members.iter().position(|m| m.url == stream.endpoint) {
            self.failed(index);
        }
    }
}

/// A watch opened by [`EtcdClient::watch_key`].
#[derive(Debug)]
pub struct WatchStream {
    endpoint: String,
    /// Kept open: etcd ends the watch when the request stream closes.
    _requests: mpsc::Sender<pb::WatchRequest>,
    responses: tonic::Streaming<pb::WatchResponse>,
}

impl WatchStream {
    /// The next answer on the watch (events, or its cancellation); waits as long as it takes.
    pub async fn next(&mut self) -> Result<pb::WatchResponse, EtcdError> {
        match self.responses.message().await {
            Ok(Some(response)) => Ok(response),
            Ok(None) => Err(EtcdError::Call {
                endpoint: self.endpoint.clone(),
                message: "the watch stream ended".into(),
            }),
            Err(status) => Err(EtcdError::Call {
                endpoint: self.endpoint.clone(),
                message: describe(&status),
            }),
        }
    }
}

impl KeepAliveStream {
    /// Sends one keep-alive for `lease_id` and waits (within `timeout`) for its answer: the
    /// lease's new TTL in seconds, 0 or less when it is gone.
    pub async fn keep_alive(&mut self, lease_id: i64, timeout: Duration) -> Result<i64, EtcdError> {
        let started = tokio::time::Instant::now();
        let sent = tokio::time::timeout(
            timeout,
            self.requests
                .send(pb::LeaseKeepAliveRequest { id: lease_id }),
        )
        .await;
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                return Err(EtcdError::Call {
                    endpoint: self.endpoint.clone(),
                    message: "the keep-alive stream is closed".into(),
                });
            }
            Err(_) => {
                return Err(EtcdError::Timeout {
                    endpoint: self.endpoint.clone(),
                    timeout,
                });
            }
        }
        self.answer(lease_id, timeout.saturating_sub(started.elapsed()))
            .await
    }

    /// Reads the answer to the keep-alive just sent.
    async fn answer(&mut self, lease_id: i64, timeout: Duration) -> Result<i64, EtcdError> {
        let responses = &mut self.responses;
        let read = async {
            loop {
                match responses.message().await {
                    Ok(Some(response)) if response.id == lease_id => return Ok(response.ttl),
                    // An answer for another lease cannot happen on our own stream; skip it.
                    Ok(Some(_)) => {}
                    Ok(None) => return Err("the keep-alive stream ended".to_owned()),
                    Err(status) => return Err(describe(&status)),
                }
            }
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(ttl)) => Ok(ttl),
            Ok(Err(message)) => Err(EtcdError::Call {
                endpoint: self.endpoint.clone(),
                message,
            }),
            Err(_) => Err(EtcdError::Timeout {
                endpoint: self.endpoint.clone(),
                timeout,
            }),
        }
    }
}

/// The end of the key range holding every key that starts with `prefix`: the prefix with its
/// last byte below 0xff incremented (etcd's convention).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: "\0" means "to the end of the key space".
    vec![0]
}

/// A gRPC status in one line.
fn describe(status: &tonic::Status) -> String {
    let message = status.message();
    if message.is_empty() {
        format!("{:?}", status.code())
    } else {
        format!("{:?}: {message}", status.code())
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_increments_the_last_byte() {
        assert_eq!(
            prefix_end(b"/snowflake/workers/3/"),
            b"/snowflake/workers/30".to_vec()
        );
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
