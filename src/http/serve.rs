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
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves `router` on `listener` until `shutdown` completes. A request head
/// not fully read within `head_timeout` closes its connection.
pub async fn serve(
    mut listener: TcpListener,
    router: Router,
    head_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let (stop, stopping) = watch::channel(false);
    // Every connection holds a receiver; all dropped means all finished.
    let (finished, connections) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        // Answers go out as soon as they are written, not held back by
        // Nagle's algorithm waiting for the client's acknowledgement.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
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
    drop(listener);
    let _ = stop.send(true);
    drop(connections);
    finished.closed().await;
    Ok(())
}
