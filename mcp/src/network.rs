//! The network of confined stdio servers with `net-hosts`: each runs in a
//! network namespace of its own whose one way out is a gateway the host
//! gives ([`ServerNetwork`]; in nexo, its egress proxy with the run's
//! allow-list, address guard, meter and audit). The server's listener comes
//! back over a [`nexo_sandbox::PrivateNet`] (through the orphan guard, which
//! passes its end on to the server's spawn) and is served until the server
//! process is ended.

use nexo_egress::NetHosts;
use std::os::fd::{AsFd, OwnedFd};

use nexo_sandbox::network::receive_listeners;
use nexo_sandbox::{Gateway, ListenerReceiver};
use tokio::io::Interest;

/// What serves the network of confined servers with `net-hosts`; the host
/// gives it ([`crate::Clients::with_network`]).
pub trait ServerNetwork: Send + Sync {
    /// The gateway for `server`, letting through `hosts` (its
    /// `net-hosts`). Called on the runtime the server's connection lives on.
    fn gateway(&self, server: &str, hosts: &NetHosts) -> Result<Box<dyn Gateway>, String>;
}

impl std::fmt::Debug for dyn ServerNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerNetwork")
    }
}

/// A server's network being served; dropped with its process, it stops
/// (the gateway's guard is dropped, and with it every connection).
#[derive(Debug)]
pub(crate) struct Served(tokio::task::JoinHandle<()>);

impl Drop for Served {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits for `server`'s listener on `receiver` and serves it with `gateway`.
/// Connections the server makes before then wait in the listener's queue.
pub(crate) fn serve(server: &str, receiver: ListenerReceiver, gateway: Box<dyn Gateway>) -> Served {
    let server = server.to_string();
    Served(tokio::spawn(async move {
        let listener = match receive(receiver).await {
            Ok(listener) => listener,
            // It never ran in a namespace of its own: its start fails and says why.
            Err(e) => {
                tracing::debug!(target: "nexo::mcp", server, "no network to serve: {e}");
                return;
            }
        };
        let serving = tokio::task::spawn_blocking(move || gateway.serve(listener)).await;
        match serving {
            Ok(Ok(guard)) => {
                std::future::pending::<()>().await;
                drop(guard);
            }
            // The listener is gone with the error: the server's connections are refused.
            Ok(Err(e)) => tracing::warn!(target: "nexo::mcp", server, "cannot serve the server's network: {e}"),
            Err(e) => tracing::warn!(target: "nexo::mcp", server, "cannot serve the server's network: {e}"),
        }
    }))
}

async fn receive(receiver: ListenerReceiver) -> std::io::Result<std::net::TcpListener> {
    let socket = std::os::unix::net::UnixStream::from(OwnedFd::from(receiver));
    socket.set_nonblocking(true)?;
    let socket = tokio::net::UnixStream::from_std(socket)?;
    loop {
        socket.readable().await?;
        let tried = socket.try_io(Interest::READABLE, || {
            receive_listeners(socket.as_fd())?.ok_or_else(|| std::io::ErrorKind::WouldBlock.into())
        });
        match tried {
            // A server has the proxy's listener only.
            Ok(listeners) => {
                return listeners.into_iter().next().ok_or_else(|| std::io::Error::other("no listener came"));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}
