//! A gateway served in-process on 127.0.0.1:0 over real sockets, stopped on drop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use switchyard::config::Config;
use switchyard::gateway::Gateway;
use tokio::sync::oneshot;

pub struct TestGateway {
    pub addr: SocketAddr,
    pub gateway: Arc<Gateway>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestGateway {
    pub async fn start(config: Config) -> TestGateway {
        Self::start_on(config, 0).await
    }

    /// On a given 127.0.0.1 port (0: any), e.g. to restart a replica where it was.
    pub async fn start_on(config: Config, port: u16) -> TestGateway {
        let gateway = switchyard::app::build(&config)
            .await
            .expect("gateway builds");
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(switchyard::app::serve(
            listener,
            gateway.clone(),
            config.tls.clone(),
            async move {
                let _ = rx.await;
            },
        ));
        TestGateway {
            addr,
            gateway,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// The MCP endpoint URL of a tenant.
    pub fn url(&self, tenant: &str) -> String {
        format!("http://{}/t/{tenant}/mcp", self.addr)
    }

    /// The MCP endpoint URL of a tenant over HTTPS (for a gateway started with `tls`).
    pub fn https_url(&self, tenant: &str) -> String {
        format!("https://{}/t/{tenant}/mcp", self.addr)
    }

    /// Stops serving and waits (bounded) for every upstream to be shut down.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(20), task).await;
        }
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}
