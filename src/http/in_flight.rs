//! The limit of requests in flight: every request holds one of this
//! process's `server.max_concurrent_requests` slots while it is served, and
//! one that finds none free is answered 503 at once rather than queued. The
//! slots are one budget for every route of the process.
//!
//! A long-poll gives its slot back once it waits: from then on it holds one
//! of its owner's places for long-polls (`server.max_long_polls_per_owner`)
//! instead, so that one owner's waiting long-polls never make another
//! owner's requests, or the probes, be refused.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::Problem;
use crate::sync::LockAnyway;

/// The slots of one process.
#[derive(Clone)]
pub(crate) struct Slots(Arc<Semaphore>);

impl Slots {
    /// `count` slots (at least 1: the settings say so).
    pub(crate) fn new(count: usize) -> Self {
        Self(Arc::new(Semaphore::new(count)))
    }
}

/// The slot a request holds, as its handler sees it: released when the
/// request ends, or earlier by [`Slot::release`].
#[derive(Clone, Default)]
pub(crate) struct Slot(Arc<Mutex<Option<OwnedSemaphorePermit>>>);

impl Slot {
    /// Gives the slot back before the request ends.
    pub(crate) fn release(&self) {
        drop(self.0.lock_anyway().take());
    }
}

/// Serves a request in one of the slots, or answers 503 `unavailable` at
/// once when none is free.
pub(crate) async fn limit(State(slots): State<Slots>, mut request: Request, next: Next) -> Response {
    let Ok(permit) = slots.0.try_acquire_owned() else {
        return Problem::unavailable()
            .detail("the server is at its limit of requests in flight; retry shortly")
            .into_response();
    };
    let slot = Slot(Arc::new(Mutex::new(Some(permit))));
    request.extensions_mut().insert(slot.clone());
    // The slot goes with the request's last handle: here when it is
    // answered, or when its future is dropped (the client went away).
    next.run(request).await
}

impl<S: Send + Sync> FromRequestParts<S> for Slot {
    type Rejection = Infallible;

    /// The request's slot; an empty one where no limit applies.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(parts.extensions.get::<Slot>().cloned().unwrap_or_default())
    }
}
