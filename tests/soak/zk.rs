//! The soak's own ZooKeeper session (direct to the ensemble, never through a proxy), made
//! again when it expires: the lock oracle, the operator and the final checks share it. Every
//! call is bounded.

use std::future::Future;
use std::time::Duration;

use zookeeper_client::Client;

/// How long one call may take (the ensemble may be restarting).
pub const CALL_LIMIT: Duration = Duration::from_secs(8);

/// A session that is re-made after it expires.
pub struct Zk {
    conn: String,
    client: tokio::sync::Mutex<Option<Client>>,
}

impl Zk {
    /// Connects to `conn` (with its chroot).
    pub async fn new(conn: &str) -> Zk {
        let zk = Zk {
            conn: conn.to_string(),
            client: tokio::sync::Mutex::new(None),
        };
        zk.client()
            .await
            .expect("the soak's first ZooKeeper session");
        zk
    }

    /// The current session (made now if there is none).
    pub async fn client(&self) -> Result<Client, String> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let connecting = Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&self.conn);
        match tokio::time::timeout(CALL_LIMIT, connecting).await {
            Ok(Ok(client)) => {
                *slot = Some(client.clone());
                Ok(client)
            }
            Ok(Err(e)) => Err(format!("connect: {e}")),
            Err(_) => Err("connect: timed out".into()),
        }
    }

    /// Runs `op` on the session, bounded by [`CALL_LIMIT`]; an expired session is dropped so
    /// that the next call makes a new one.
    pub async fn call<T, F, Fut>(&self, op: F) -> Result<T, String>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, zookeeper_client::Error>>,
    {
        let client = self.client().await?;
        match tokio::time::timeout(CALL_LIMIT, op(client)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                if matches!(
                    e,
                    zookeeper_client::Error::SessionExpired | zookeeper_client::Error::ClientClosed
                ) {
                    *self.client.lock().await = None;
                }
                Err(e.to_string())
            }
            Err(_) => Err("timed out".into()),
        }
    }

    /// Like [`Zk::call`], but a missing node gives `None`.
    pub async fn call_opt<T, F, Fut>(&self, op: F) -> Result<Option<T>, String>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, zookeeper_client::Error>>,
    {
        self.call(|c| async move {
            match op(c).await {
                Ok(v) => Ok(Some(v)),
                Err(zookeeper_client::Error::NoNode) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await
    }
}
