//! One direction of a proxy tunnel without copying through user space: the
//! kernel moves the bytes from one socket into a pipe and from the pipe to
//! the other socket (`splice(2)`), so a tunnel costs about what a direct
//! connection does. The bytes are still counted, chunk by chunk, before
//! they leave the pipe.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// The most one splice moves, and the pipe's size.
const CHUNK: usize = 256 * 1024;

/// A Tokio socket whose readiness a raw `splice` call can wait on.
pub(crate) trait Socket: AsFd + Sync {
    /// Waits until `interest` may be ready.
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    /// Runs `io`, clearing the readiness it found missing (`WouldBlock`).
    fn attempt<R>(&self, interest: Interest, io: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

impl Socket for TcpStream {
    async fn ready(&self, interest: Interest) -> io::Result<()> {
        TcpStream::ready(self, interest).await.map(|_| ())
    }
    fn attempt<R>(&self, interest: Interest, io: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        self.try_io(interest, io)
    }
}

impl Socket for UnixStream {
    async fn ready(&self, interest: Interest) -> io::Result<()> {
        UnixStream::ready(self, interest).await.map(|_| ())
    }
    fn attempt<R>(&self, interest: Interest, io: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        self.try_io(interest, io)
    }
}

/// A pipe for one direction.
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    /// A non-blocking pipe, grown to [`CHUNK`] where the system allows (a
    /// user's pipes share a page budget: 256 KiB keeps a run's 64 tunnels
    /// within it).
    pub(crate) fn new() -> io::Result<Pipe> {
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
        let _ = rustix::pipe::fcntl_setpipe_size(&write, CHUNK);
        Ok(Pipe { read, write })
    }

    /// Moves what `from` has, up to `most` (at most [`CHUNK`]), into the
    /// pipe: the bytes moved, 0 at the end of `from`.
    pub(crate) async fn fill(&self, from: &impl Socket, most: usize) -> io::Result<usize> {
        let most = most.clamp(1, CHUNK);
        let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
        loop {
            from.ready(Interest::READABLE).await?;
            let moved = from.attempt(Interest::READABLE, || {
                rustix::pipe::splice(from.as_fd(), None, &self.write, None, most, flags).map_err(io::Error::from)
            });
            match moved {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                moved => return moved,
            }
        }
    }

    /// Moves `n` bytes from the pipe to `to`.
    pub(crate) async fn drain(&self, to: &impl Socket, mut n: usize) -> io::Result<()> {
        let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
        while n > 0 {
            to.ready(Interest::WRITABLE).await?;
            let moved = to.attempt(Interest::WRITABLE, || {
                rustix::pipe::splice(&self.read, None, to.as_fd(), None, n, flags).map_err(io::Error::from)
            });
            match moved {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => n -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Gives the client's Unix socket room for a chunk in flight, as TCP's
/// autotuning does for its own.
pub(crate) fn widen(client: &UnixStream) {
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(client, CHUNK);
}

/// Shuts `to` for writing: its peer reads the end.
pub(crate) fn shut_write(to: &impl AsFd) {
    let _ = rustix::net::shutdown(to, rustix::net::Shutdown::Write);
}
