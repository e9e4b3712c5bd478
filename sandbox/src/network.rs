//! Network for a confined command through the host's gateway and nothing
//! else.
//!
//! A command granted network gets a network namespace of its own, made
//! between fork and exec, in which only the loopback interface exists. In
//! it, before anything of the command runs, a TCP listener is bound at
//! [`PROXY_ADDR`] and handed to the host over a socket pair; the host serves
//! it with a [`Gateway`] (nexo's egress proxy), and the command's
//! environment names it in `HTTP_PROXY` and `HTTPS_PROXY`. The command's
//! seccomp filter allows TCP sockets and no other kind (no UDP, so no DNS
//! query leaves; no Unix, raw or netlink socket), and under Landlock it may
//! connect to the proxy's port only and bind nowhere. A program that
//! ignores the proxy variables finds nothing to connect to: the namespace
//! has no route out, and the gateway, running in the host's namespace,
//! alone decides what a connection reaches.
//!
//! The namespace needs a user namespace to be made without privileges; the
//! command's user and group are mapped to themselves in it, so files keep
//! their owners. The capabilities the command holds in it (when the host
//! is not root) are dropped before it runs.

#![allow(unsafe_code)] // raw syscalls between fork and exec

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;

/// Where a command's proxy listens, inside its own namespace.
pub const PROXY_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3128);

/// The most loopback ports a namespace may forward to the host's
/// ([`crate::ProgramConfinement::forward_ports`]).
pub const MAX_FORWARDS: usize = 4;

/// Errno the hooks report when the command's network namespace cannot be
/// made. `execve` never returns it, so the parent can tell.
pub(crate) const NETWORK_REFUSED: i32 = libc::ENONET;

/// What serves a confined command's network: each connection the command
/// makes to [`PROXY_ADDR`] arrives on the listener it is given.
pub trait Gateway: Send + Sync {
    /// Serves the connections accepted on `listener` (bound in the
    /// command's namespace) until the returned [`Serving`] is stopped or
    /// dropped, which the sandbox does once the command has ended. Called
    /// off the host's async threads.
    fn serve(&self, listener: TcpListener) -> io::Result<Box<dyn Serving>>;

    /// What the gateway lets through, in a few words (`nexo inspect`, the
    /// model's instructions), e.g. `HTTP(S) to api.example.com:443 through
    /// nexo's egress proxy`.
    fn describe(&self) -> String;
}

/// A listener being served by a [`Gateway`]. Dropped, it stops at once;
/// [`Serving::stop`] stops it and waits until every connection through it
/// has ended and been accounted for (an audit record each).
pub trait Serving: Send {
    /// Stops serving; resolves once every connection has ended.
    fn stop(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// Runs `future` to its end on this thread (not a runtime's: a blocking
/// one), parked between polls: what a [`Serving`] waits for runs elsewhere.
pub(crate) fn wait<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut context = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}

impl fmt::Debug for dyn Gateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The variables that point a command at its proxy. `NO_PROXY` is empty:
/// nothing is reached around it.
pub fn proxy_env() -> [(&'static str, String); 8] {
    let url = format!("http://{PROXY_ADDR}");
    [
        ("HTTP_PROXY", url.clone()),
        ("http_proxy", url.clone()),
        ("HTTPS_PROXY", url.clone()),
        ("https_proxy", url.clone()),
        ("ALL_PROXY", url.clone()),
        ("all_proxy", url),
        ("NO_PROXY", String::new()),
        ("no_proxy", String::new()),
    ]
}

/// A namespace to be made in a child: the socket pair over which the child
/// hands its listener to the host. The child's end may be given on to
/// another process that spawns the program ([`PrivateNet::child_fd`]);
/// the host keeps the other ([`PrivateNet::into_receiver`]).
#[derive(Debug)]
pub struct PrivateNet {
    host: OwnedFd,
    child: OwnedFd,
}

/// The host's end of a [`PrivateNet`], once the child's end is given away:
/// the listener arrives on it. Readable (see [`AsFd`]) when it has come, or
/// when every holder of the child's end is gone without sending it.
#[derive(Debug)]
pub struct ListenerReceiver {
    host: OwnedFd,
}

/// The child's part of a [`PrivateNet`]: plain data, so a `pre_exec` hook
/// can own it.
#[derive(Debug, Clone)]
pub(crate) struct Enter {
    child: RawFd,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Loopback ports bound besides the proxy's, at most [`MAX_FORWARDS`].
    forwards: Vec<u16>,
}

impl PrivateNet {
    /// The socket pair, ready for a fork.
    pub fn new() -> io::Result<PrivateNet> {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two descriptors into the array.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0
        {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both were just opened and are owned by nothing else.
        let (host, child) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Above stdio, which the child's std replaces before the hook runs
        // (a host started with stdin closed would otherwise hand out 0).
        let child = rustix::io::fcntl_dupfd_cloexec(&child, 3)?;
        Ok(PrivateNet { host, child })
    }

    /// What the child's hook runs ([`Enter::enter`]).
    pub(crate) fn enter(&self) -> Enter {
        Enter::new(self.child.as_raw_fd(), &[])
    }

    /// The child's end (close-on-exec, numbered 3 or above): for
    /// [`crate::ProgramConfinement::proxied`], in this process or in one it
    /// is inherited by. Open until [`PrivateNet::into_receiver`].
    pub fn child_fd(&self) -> RawFd {
        self.child.as_raw_fd()
    }

    /// After the spawn: closes this process's copy of the child's end and
    /// keeps the host's, to receive the listener on.
    pub fn into_receiver(self) -> ListenerReceiver {
        drop(self.child);
        ListenerReceiver { host: self.host }
    }

    /// After the spawn (the hook has run by then): the listener the child
    /// made.
    pub(crate) fn listener(self) -> io::Result<TcpListener> {
        self.into_receiver()
            .try_receive()?
            .and_then(|listeners| listeners.into_iter().next())
            .ok_or_else(|| io::Error::other("the command's network listener did not arrive: nothing came"))
    }
}

impl AsFd for ListenerReceiver {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.host.as_fd()
    }
}

impl From<ListenerReceiver> for OwnedFd {
    /// The socket, to wait on it some other way (say as a
    /// `tokio::net::UnixStream`) and call [`receive_listener`] on it.
    fn from(receiver: ListenerReceiver) -> OwnedFd {
        receiver.host
    }
}

impl ListenerReceiver {
    /// The listeners, if they have come (`None`: not yet): the proxy's
    /// first, then one per forwarded port in order. An error if every
    /// holder of the child's end closed it without sending them (the
    /// program could not be started, or not in a namespace of its own).
    /// Never blocks.
    pub fn try_receive(&self) -> io::Result<Option<Vec<TcpListener>>> {
        receive_listeners(self.host.as_fd())
    }
}

/// [`ListenerReceiver::try_receive`] on the host's end of a [`PrivateNet`]
/// taken out of its receiver.
pub fn receive_listeners(socket: BorrowedFd<'_>) -> io::Result<Option<Vec<TcpListener>>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    // Room for one descriptor's control message, aligned for cmsghdr.
    let mut space = [0u64; 8];
    // SAFETY: zeroed msghdr is valid; its pointers are set to locals alive for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space) as _;
    let flags = libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC;
    // SAFETY: recvmsg writes within the buffers msg points at.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, flags) };
    if n < 0 {
        let error = io::Error::last_os_error();
        if error.kind() == io::ErrorKind::WouldBlock {
            return Ok(None);
        }
        return Err(io::Error::other(format!("the command's network listener did not arrive: {error}")));
    }
    if n != 1 {
        return Err(io::Error::other("the command's network listener did not arrive: its end was closed without it"));
    }
    let mut listeners = Vec::new();
    // SAFETY: the kernel filled the control buffer; the macros walk it
    // within msg_controllen, and each descriptor it holds is ours to own.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if !cmsg.is_null() && (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
            let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
            let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
            for i in 0..count {
                listeners.push(TcpListener::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
            }
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 || listeners.is_empty() || listeners.len() > 1 + MAX_FORWARDS {
        return Err(io::Error::other("the command's network listeners did not arrive whole"));
    }
    for listener in &listeners {
        // Only listening TCP sockets, whatever the other end sent.
        let listening = rustix::net::sockopt::socket_acceptconn(listener).unwrap_or(false);
        let tcp = matches!(listener.local_addr(), Ok(std::net::SocketAddr::V4(_)));
        if !listening || !tcp {
            return Err(io::Error::other("the command's network listener is not a listening TCP socket"));
        }
        listener.set_nonblocking(true)?;
    }
    Ok(Some(listeners))
}

impl Enter {
    /// What a child's hook needs to make its namespace and send its
    /// listeners over `child` (the proxy's, and one per port of
    /// `forwards`, at most [`MAX_FORWARDS`] of them), prepared before the
    /// fork.
    pub(crate) fn new(child: RawFd, forwards: &[u16]) -> Enter {
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Enter {
            child,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            forwards: forwards.iter().copied().take(MAX_FORWARDS).collect(),
        }
    }

    /// In the forked child: a user and network namespace of its own, its
    /// loopback up, a listener at [`PROXY_ADDR`] (and one at each forwarded
    /// loopback port) sent to the host.
    /// Async-signal-safe: raw syscalls on memory prepared before the fork.
    pub(crate) fn enter(&self) -> io::Result<()> {
        let refused = || io::Error::from_raw_os_error(NETWORK_REFUSED);
        // SAFETY: raw syscalls on locals and on buffers owned by self.
        unsafe {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
                return Err(refused());
            }
            // `setgroups` must be refused before an unprivileged process may map its group.
            let maps: [(&std::ffi::CStr, &[u8]); 3] = [
                (c"/proc/self/setgroups", b"deny\n"),
                (c"/proc/self/uid_map", &self.uid_map),
                (c"/proc/self/gid_map", &self.gid_map),
            ];
            for (path, content) in maps {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(refused());
                }
                let written = libc::write(fd, content.as_ptr().cast(), content.len());
                libc::close(fd);
                if written != content.len() as isize {
                    return Err(refused());
                }
            }
            loopback_up().map_err(|_| refused())?;
            let mut fds: [RawFd; 1 + MAX_FORWARDS] = [-1; 1 + MAX_FORWARDS];
            let ports = std::iter::once(PROXY_ADDR.port()).chain(self.forwards.iter().copied());
            let mut made = 0;
            let mut bound = Ok(());
            for (slot, port) in fds.iter_mut().zip(ports) {
                match listen(port) {
                    Ok(fd) => {
                        *slot = fd;
                        made += 1;
                    }
                    Err(e) => {
                        bound = Err(e);
                        break;
                    }
                }
            }
            let sent = bound.and_then(|()| send_fds(self.child, &fds[..made]));
            for fd in &fds[..made] {
                libc::close(*fd);
            }
            libc::close(self.child);
            sent.map_err(|_| refused())
        }
    }
}

/// Brings `lo` up in the current network namespace.
unsafe fn loopback_up() -> io::Result<()> {
    // SAFETY: raw syscalls on a local ifreq.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (to, from) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *to = *from as libc::c_char;
        }
        let mut done = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) == 0;
        if done {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            done = libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) == 0;
        }
        let error = io::Error::last_os_error();
        libc::close(fd);
        if done { Ok(()) } else { Err(error) }
    }
}

/// A listening TCP socket at `port` of the loopback address.
unsafe fn listen(port: u16) -> io::Result<RawFd> {
    // SAFETY: raw syscalls on a local sockaddr.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(*PROXY_ADDR.ip()).to_be() },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::bind(fd, (&addr as *const libc::sockaddr_in).cast(), len) != 0 || libc::listen(fd, 64) != 0 {
            let error = io::Error::last_os_error();
            libc::close(fd);
            return Err(error);
        }
        Ok(fd)
    }
}

/// Sends `fds` (at most 1 + [`MAX_FORWARDS`]) in one message over the Unix
/// socket `to`.
unsafe fn send_fds(to: RawFd, fds: &[RawFd]) -> io::Result<()> {
    // SAFETY: sendmsg reads the locals msg points at.
    unsafe {
        let byte = [b'n'];
        let mut iov = libc::iovec { iov_base: byte.as_ptr().cast_mut().cast(), iov_len: 1 };
        let mut space = [0u64; 8];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        let size = std::mem::size_of_val(fds) as u32;
        msg.msg_controllen = libc::CMSG_SPACE(size) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size) as _;
        let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
        for (i, fd) in fds.iter().enumerate() {
            std::ptr::write_unaligned(data.add(i), *fd);
        }
        if libc::sendmsg(to, &msg, libc::MSG_NOSIGNAL) != 1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
