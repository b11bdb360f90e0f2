//! The listening sockets of the API and of the simulator.

use tokio::net::TcpListener;

/// Connections the kernel may hold for a listener before they are accepted
/// (capped by `net.core.somaxconn`). With the usual 128, a burst of a
/// thousand clients at once (a storm on one key) overflows the queue: the
/// kernel drops the handshakes' last packets and those clients wait a
/// 200 ms retransmission before they are served.
const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with a queue of [`LISTEN_BACKLOG`] connections.
pub(crate) fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    // As `TcpListener::bind` does: a restarted server can bind at once.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}
