//! An owner's webhook endpoints as the API manages them: registered,
//! listed, deleted, their secrets rotated, their deliveries shown. Every
//! call is scoped to the owner; another owner's endpoint is none.

use std::time::Duration;

use uuid::Uuid;

use crate::domain::OwnerId;
use crate::store::{self, Delivery, Endpoint, NewEndpoint, Store};

/// The endpoint use cases.
pub struct Endpoints {
    store: Store,
    max_per_owner: u32,
}

impl Endpoints {
    /// The endpoints kept in `store`, at most `max_per_owner` of an owner's.
    pub fn new(store: Store, max_per_owner: u32) -> Self {
        Self { store, max_per_owner }
    }

    /// Registers an endpoint (its URL checked by the caller), unless its
    /// owner has as many as it may already (`None`).
    pub async fn register(&self, new: &NewEndpoint) -> store::Result<Option<Endpoint>> {
        self.store.insert_webhook_endpoint(new, self.max_per_owner).await
    }

    /// The most endpoints one owner may have.
    pub fn max_per_owner(&self) -> u32 {
        self.max_per_owner
    }

    /// The owner's endpoints, the oldest first.
    pub async fn list(&self, owner: &OwnerId) -> store::Result<Vec<Endpoint>> {
        self.store.list_webhook_endpoints(owner).await
    }

    /// Deletes one of the owner's endpoints with its deliveries; `false`
    /// when it has none such.
    pub async fn delete(&self, owner: &OwnerId, id: Uuid) -> store::Result<bool> {
        self.store.delete_webhook_endpoint(owner, id).await
    }

    /// Gives one of the owner's endpoints a new secret; the old one still
    /// signs for `keep_old`. `None` when it has no such endpoint.
    pub async fn rotate_secret(
        &self,
        owner: &OwnerId,
        id: Uuid,
        secret: &str,
        keep_old: Duration,
    ) -> store::Result<Option<Endpoint>> {
        self.store.rotate_webhook_secret(owner, id, secret, keep_old).await
    }

    /// The latest `limit` deliveries to one of the owner's endpoints;
    /// `None` when it has no such endpoint.
    pub async fn deliveries(&self, owner: &OwnerId, id: Uuid, limit: u32) -> store::Result<Option<Vec<Delivery>>> {
        self.store.list_webhook_deliveries(owner, id, limit).await
    }
}
