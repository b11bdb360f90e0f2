//! A TCP proxy that can go silent: while blackholed it forwards nothing in
//! either direction and drops what it reads, but keeps every socket open,
//! as a network that loses packets without a reset does. Neither end sees
//! an error; only its own deadlines can tell.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A proxy on loopback to one target; dropped, it stops accepting.
pub struct Blackhole {
    pub addr: SocketAddr,
    silent: Arc<AtomicBool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Blackhole {
    /// Starts forwarding to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let silent = Arc::new(AtomicBool::new(false));
        let flag = silent.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let flag = flag.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else { return };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        forward(client_read, server_write, flag.clone()),
                        forward(server_read, client_write, flag)
                    );
                });
            }
        });
        Self { addr, silent, accepting }
    }

    /// Stops forwarding (`true`) or forwards again (`false`); what was read
    /// while silent is lost.
    pub fn silence(&self, silent: bool) {
        self.silent.store(silent, Ordering::SeqCst);
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Copies `from` to `to` until either closes, dropping what it reads while
/// `silent` is set.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    silent: Arc<AtomicBool>,
) {
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if silent.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    if silent.load(Ordering::SeqCst) {
        // A silent network carries no FIN either: the other end stays open.
        std::future::pending::<()>().await;
    }
    let _ = to.shutdown().await;
}
