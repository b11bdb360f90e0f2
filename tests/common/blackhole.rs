//! A TCP proxy that can go silent, as a network that carries nothing and
//! resets nothing: neither end sees an error, only its own deadlines can
//! tell. Two kinds of silence:
//!
//! - [`Blackhole::silence`]: what is sent is read and dropped, as by a
//!   broken middlebox; a connection caught mid-exchange never gets its
//!   answer, even once traffic flows again;
//! - [`Blackhole::pause`]: nothing is read, so what is sent waits in the
//!   sockets' buffers, as TCP keeps what a lossy network has not delivered
//!   and sends it once the network carries again.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

/// Where the proxy forwards to.
#[derive(Clone)]
enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// What the proxy does now.
struct State {
    silent: AtomicBool,
    paused: tokio::sync::watch::Sender<bool>,
    // Each connection's own silence (`Blackhole::silence_open`).
    connections: std::sync::Mutex<Vec<Arc<AtomicBool>>>,
}

/// A proxy on loopback to one target; dropped, it stops accepting.
pub struct Blackhole {
    pub addr: SocketAddr,
    state: Arc<State>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Blackhole {
    /// Starts forwarding to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        Self::start_to(Target::Tcp(target)).await
    }

    /// Starts forwarding to the Unix socket at `path` (a Postgres server's
    /// `.s.PGSQL.5432`).
    pub async fn start_unix(path: PathBuf) -> Self {
        Self::start_to(Target::Unix(path)).await
    }

    async fn start_to(target: Target) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            silent: AtomicBool::new(false),
            paused: tokio::sync::watch::Sender::new(false),
            connections: Default::default(),
        });
        let shared = state.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (state, target) = (shared.clone(), target.clone());
                tokio::spawn(async move {
                    match target {
                        Target::Tcp(addr) => {
                            if let Ok(server) = TcpStream::connect(addr).await {
                                relay(client, server, state).await;
                            }
                        }
                        Target::Unix(path) => {
                            if let Ok(server) = UnixStream::connect(path).await {
                                relay(client, server, state).await;
                            }
                        }
                    }
                });
            }
        });
        Self { addr, state, accepting }
    }

    /// Stops forwarding (`true`) or forwards again (`false`); what was read
    /// while silent is lost.
    pub fn silence(&self, silent: bool) {
        self.state.silent.store(silent, Ordering::SeqCst);
    }

    /// Silences the connections open now for good, as a NAT or a firewall
    /// that forgot them would; later ones are carried.
    pub fn silence_open(&self) {
        for connection in self.state.connections.lock().unwrap().iter() {
            connection.store(true, Ordering::SeqCst);
        }
    }

    /// Stops reading (`true`) or reads and forwards again (`false`); what
    /// was sent meanwhile is forwarded then.
    pub fn pause(&self, paused: bool) {
        self.state.paused.send_replace(paused);
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Forwards both ways between `client` and `server`.
async fn relay(client: TcpStream, server: impl AsyncRead + AsyncWrite + Unpin, state: Arc<State>) {
    let own = Arc::new(AtomicBool::new(false));
    state.connections.lock().unwrap().push(own.clone());
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = tokio::io::split(server);
    tokio::join!(
        forward(client_read, server_write, state.clone(), own.clone()),
        forward(server_read, client_write, state, own)
    );
}

/// Copies `from` to `to` until either closes: reading nothing while
/// paused, dropping what it reads while silent (all, or this connection).
async fn forward(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    state: Arc<State>,
    own: Arc<AtomicBool>,
) {
    let silent = || state.silent.load(Ordering::SeqCst) || own.load(Ordering::SeqCst);
    let mut buffer = vec![0; 64 * 1024];
    let mut paused = state.paused.subscribe();
    loop {
        if paused.wait_for(|paused| !paused).await.is_err() {
            break;
        }
        // A pause ends a read waiting for bytes (reading is cancel-safe).
        let read = tokio::select! {
            _ = paused.wait_for(|paused| *paused) => continue,
            read = from.read(&mut buffer) => read,
        };
        let read = match read {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if silent() {
            continue;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    if silent() {
        // A silent network carries no FIN either: the other end stays open.
        std::future::pending::<()>().await;
    }
    let _ = to.shutdown().await;
}
