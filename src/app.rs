//! Building the application: settings in, a bound listener and the shared
//! state out. `main` and the tests build it the same way, the tests on port 0.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::catalog::Catalog;
use crate::config::Settings;
use crate::http::{self, AppState, auth::Authenticator};
use crate::store::postgres::{PostgresOptions, PostgresStore};
use crate::store::{Store, StoreError};

/// Why the application cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No database was named.
    #[error("no database: set DATABASE_URL (postgres://user:password@host/database) or [database] url")]
    NoDatabase,
    /// The URL's scheme names no supported database.
    #[error("unsupported database URL scheme in '{0}': use postgres://")]
    UnsupportedDatabase(String),
    /// The store failed (connecting, migrating).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Opens the store the settings name.
pub fn open_store(settings: &Settings) -> Result<Arc<dyn Store>, StartError> {
    let url = settings.database.url.as_deref().ok_or(StartError::NoDatabase)?;
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let options = PostgresOptions {
            max_connections: settings.database.max_connections,
            acquire_timeout: Duration::from_millis(settings.database.acquire_timeout_ms),
            statement_timeout: Duration::from_millis(settings.database.statement_timeout_ms),
        };
        Ok(Arc::new(PostgresStore::connect_lazy(url, &options)?))
    } else {
        let scheme = url.split("://").next().unwrap_or(url);
        Err(StartError::UnsupportedDatabase(scheme.to_owned()))
    }
}

/// A built application, bound and ready to serve.
pub struct Application {
    listener: TcpListener,
    state: AppState,
}

impl Application {
    /// Opens the store, applies migrations if the settings say so, and binds
    /// the listener.
    pub async fn build(settings: Settings) -> Result<Self, StartError> {
        let store = open_store(&settings)?;
        if settings.database.migrate_on_start {
            store.migrate().await?;
        }
        Self::build_with_store(settings, store).await
    }

    /// Binds the listener around an open store.
    pub async fn build_with_store(settings: Settings, store: Arc<dyn Store>) -> Result<Self, StartError> {
        let addr = settings.server.listen;
        let listener = TcpListener::bind(addr).await.map_err(|source| StartError::Bind { addr, source })?;
        let auth = Authenticator::new(store.clone(), Duration::from_millis(settings.server.auth_cache_ttl_ms));
        let state = AppState {
            store,
            catalog: Arc::new(Catalog::new(&settings)),
            auth: Arc::new(auth),
            settings: Arc::new(settings.server),
        };
        Ok(Self { listener, state })
    }

    /// The address actually bound (port 0 becomes a real port).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// The shared state, for tests that reach the store directly.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` completes, then finishes in-flight requests.
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        let router = http::router(self.state);
        axum::serve(self.listener, router).with_graceful_shutdown(shutdown).await
    }
}
