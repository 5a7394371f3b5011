//! The real Snowflake service in-process on 127.0.0.1:0 (every listener), with the system clock.

use snowflake_core::{Clock, SystemClock};
use snowflake_server::{Config, Listeners, Node, RunError};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running service; [`Service::stop`] shuts it down gracefully.
#[derive(Debug)]
pub struct Service {
    /// The HTTP listener.
    pub http: SocketAddr,
    /// The gRPC listener.
    pub grpc: SocketAddr,
    /// The Thrift listener.
    pub thrift: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), RunError>>,
    _dir: tempfile::TempDir,
}

impl Service {
    /// Starts the service with every listener on `127.0.0.1:0` and a fresh state directory.
    pub async fn start() -> Service {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::with_state_dir(dir.path());
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        config.listeners.http_addr = Some(any);
        config.listeners.grpc_addr = Some(any);
        config.listeners.thrift_addr = Some(any);
        let node =
            Node::new(&config, Arc::new(SystemClock) as Arc<dyn Clock>).expect("node starts");
        let listeners = Listeners::bind(&config).await.expect("binds");
        let http = listeners.http_addr().expect("http on");
        let grpc = listeners.grpc_addr().expect("grpc on");
        let thrift = listeners.thrift_addr().expect("thrift on");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            snowflake_server::run(node, &config, listeners, async {
                let _ = stopped.await;
            })
            .await
        });
        Service {
            http,
            grpc,
            thrift,
            stop,
            task,
            _dir: dir,
        }
    }

    /// Shuts the service down and waits until it has stopped cleanly.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.expect("no panic").expect("clean stop");
    }
}
