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
    /// `net-hosts`), which may be private or loopback addresses when
    /// `allow_private` (its `allow-private`). Called on the runtime the
    /// server's connection lives on.
    fn gateway(&self, server: &str, hosts: &NetHosts, allow_private: bool) -> Result<Box<dyn Gateway>, String>;
}

impl std::fmt::Debug for dyn ServerNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerNetwork")
    }
}

/// A server's network being served; dropped with its process, it stops
/// (the gateway's guard is dropped, and with it every connection).
#[derive(Debug)]
pub(crate) struct Served {
    task: tokio::task::JoinHandle<()>,
    /// Whether serving began, or why not; taken by [`Served::ready`].
    ready: Option<tokio::sync::oneshot::Receiver<Result<(), String>>>,
    /// Asks the task to stop serving gracefully.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Served {
    /// Waits until the server's network is served, or says why it never
    /// will be.
    pub(crate) async fn ready(&mut self) -> Result<(), String> {
        match self.ready.take() {
            Some(ready) => ready.await.unwrap_or_else(|_| Err("its gateway stopped".into())),
            None => Ok(()),
        }
    }
}

impl Served {
    /// Stops serving (the server has ended): resolves once each of its
    /// connections has ended and been reported.
    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits for `server`'s listener on `receiver` and serves it with `gateway`.
/// Connections the server makes before then wait in the listener's queue.
pub(crate) fn serve(receiver: ListenerReceiver, gateway: Box<dyn Gateway>) -> Served {
    let (tell, ready) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        // It never ran in a namespace of its own (its start failed), or the gateway failed.
        let listener = match receive(receiver).await {
            Ok(listener) => listener,
            Err(e) => {
                let _ = tell.send(Err(format!("it was not started in a network namespace of its own ({e})")));
                return;
            }
        };
        match tokio::task::spawn_blocking(move || gateway.serve(listener)).await {
            Ok(Ok(serving)) => {
                let _ = tell.send(Ok(()));
                // Until asked to stop (or dropped, and aborted).
                let _ = stopped.await;
                serving.stop().await;
            }
            Ok(Err(e)) => drop(tell.send(Err(format!("its gateway could not serve it: {e}")))),
            Err(e) => drop(tell.send(Err(format!("its gateway could not serve it: {e}")))),
        }
    });
    Served { task, ready: Some(ready), stop: Some(stop) }
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
