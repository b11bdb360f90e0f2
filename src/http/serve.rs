//! Serving the API over HTTP/1.1 with hyper, as `axum::serve` does, plus
//! what it lacks: a deadline on reading a request's head. Without one, a
//! client trickling header bytes (slowloris) holds its connection forever,
//! before any handler or request deadline can see it. Graceful shutdown:
//! stop accepting, let every connection finish its request in flight.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tower::ServiceExt;

/// The address of the connection a request came on, in its extensions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(pub std::net::SocketAddr);
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves `router` on `listener` until `shutdown` completes. A request head
/// not fully read within `head_timeout` closes its connection. The listener
/// is closed as soon as `shutdown` completes (a new connection is refused),
/// then every connection finishes its request in flight.
pub(crate) async fn serve(
    mut listener: TcpListener,
    router: Router,
    head_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let draining = accept_until(&mut listener, router, head_timeout, shutdown).await;
    drop(listener);
    draining.finish().await;
    Ok(())
}

/// As [`serve`], but leaves `listener` open for what serves next: a
/// connection made meanwhile waits in its queue.
pub(crate) async fn serve_for_now(
    listener: &mut TcpListener,
    router: Router,
    head_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send,
) {
    accept_until(listener, router, head_timeout, shutdown).await.finish().await;
}

/// The connections of a listener no longer accepting, finishing.
struct Draining {
    stop: watch::Sender<bool>,
    finished: watch::Sender<()>,
    connections: watch::Receiver<()>,
}

impl Draining {
    /// Tells every connection to stop after its request in flight, and
    /// waits until all have.
    async fn finish(self) {
        let _ = self.stop.send(true);
        drop(self.connections);
        self.finished.closed().await;
    }
}

/// Accepts connections on `listener` and serves each until `shutdown`
/// completes.
async fn accept_until(
    listener: &mut TcpListener,
    router: Router,
    head_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send,
) -> Draining {
    let (stop, stopping) = watch::channel(false);
    // Every connection holds a receiver; all dropped means all finished.
    let (finished, connections) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = axum::serve::Listener::accept(listener) => accepted,
            () = &mut shutdown => break,
        };
        // Answers go out as soon as they are written, not held back by
        // Nagle's algorithm waiting for the client's acknowledgement.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone().map_request(
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(Peer(peer));
                request
            },
        ));
        let (mut stopping, connection) = (stopping.clone(), connections.clone());
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(head_timeout);
            let mut serving = pin!(builder.serve_connection(TokioIo::new(stream), service));
            tokio::select! {
                _ = serving.as_mut() => {}
                () = async { drop(stopping.wait_for(|stop| *stop).await) } => {
                    serving.as_mut().graceful_shutdown();
                    let _ = serving.await;
                }
            }
            drop(connection);
        });
    }
    Draining { stop, finished, connections }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thousand clients connecting at once to a listener that has not
    /// accepted any yet are all connected by the kernel at once. With the
    /// usual queue of 128 the rest would wait for a handshake retried after
    /// a second (the bound below is half of that). The kernel's own cap,
    /// `net.core.somaxconn`, must allow 1,000 (Linux's default is 4096).
    #[tokio::test]
    async fn a_thousand_clients_connecting_at_once_are_all_queued_without_a_retry() {
        let listener = crate::process::listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut connecting = tokio::task::JoinSet::new();
        for _ in 0..1000 {
            connecting.spawn(async move {
                tokio::time::timeout(Duration::from_millis(500), tokio::net::TcpStream::connect(addr)).await
            });
        }
        let mut connected = Vec::new();
        while let Some(outcome) = connecting.join_next().await {
            if let Ok(Ok(stream)) = outcome.unwrap() {
                connected.push(stream);
            }
        }
        assert_eq!(connected.len(), 1000, "clients connected within 500 ms, none accepted yet");
        drop(listener);
    }
}
