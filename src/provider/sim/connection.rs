//! The simulator's connections: each accepted socket is wrapped so that a
//! handler can reset it (a provider's `fault`), and so that the simulator
//! knows when a client closed its end before the answer.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// The simulator's listener: every connection can be reset by the handler
/// serving a request on it (axum handlers cannot otherwise reset one).
pub(super) struct SimListener(pub(super) TcpListener);

impl axum::serve::Listener for SimListener {
    type Io = SimStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (SimStream, SocketAddr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.0).await;
        // Answer at once, as a provider's server would (no Nagle delay).
        let _ = stream.set_nodelay(true);
        (SimStream { stream, reset: Arc::new(AtomicBool::new(false)) }, addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// A connection that fails its next read or write, closing with a reset
/// (`SO_LINGER` 0), once its [`Connection`] asks for it.
pub(super) struct SimStream {
    stream: TcpStream,
    reset: Arc<AtomicBool>,
}

impl SimStream {
    fn poll_reset(&self) -> Option<io::Error> {
        if !self.reset.load(Ordering::Acquire) {
            return None;
        }
        // Closing a socket with a zero linger sends RST instead of FIN.
        if let Err(error) = self.stream.set_zero_linger() {
            tracing::warn!(%error, "the simulator could not arm a connection reset");
        }
        Some(io::ErrorKind::ConnectionReset.into())
    }
}

impl AsyncRead for SimStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.poll_reset() {
            Some(error) => Poll::Ready(Err(error)),
            None => Pin::new(&mut self.stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.poll_reset() {
            Some(error) => Poll::Ready(Err(error)),
            None => Pin::new(&mut self.stream).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.poll_reset() {
            Some(error) => Poll::Ready(Err(error)),
            None => Pin::new(&mut self.stream).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.poll_reset() {
            Some(error) => Poll::Ready(Err(error)),
            None => Pin::new(&mut self.stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The connection a request came on, as a handler sees it.
#[derive(Clone)]
pub(super) struct Connection {
    reset: Arc<AtomicBool>,
}

impl Connection {
    /// The connection is reset instead of carrying the handler's answer.
    pub(super) fn reset(&self) {
        self.reset.store(true, Ordering::Release);
    }
}

impl Connected<IncomingStream<'_, SimListener>> for Connection {
    fn connect_info(stream: IncomingStream<'_, SimListener>) -> Self {
        Self { reset: stream.io().reset.clone() }
    }
}
