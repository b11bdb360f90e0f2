//! How a group of new jobs is written on Postgres (the queue and the turn:
//! [`crate::store::groups`]): one statement and one commit for each
//! owner's creations, the owners' statements at once, so that one round
//! trip and one log flush cover them all.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::bounded::answered;
use super::direct::DirectConnections;
use super::sql::CREATE_JOBS;
use crate::store::groups::{Creation, interrupted};
use crate::store::{NewJob, Result, StoreError};

/// Writes a group: each owner's creations by one statement, the owners'
/// statements at once, and answers each creation.
pub(super) async fn insert_jobs(direct: &DirectConnections, group: Vec<Creation>) {
    let mut owners: Vec<Vec<Creation>> = Vec::new();
    for creation in group {
        match owners.iter_mut().find(|same| same[0].new.owner == creation.new.owner) {
            Some(same) => same.push(creation),
            None => owners.push(vec![creation]),
        }
    }
    futures_util::future::join_all(owners.into_iter().map(|same| insert_owners_jobs(direct, same))).await;
}

/// Writes one owner's creations by one statement and answers each. If it
/// fails, each is written alone, so that one bad request cannot fail the
/// others.
async fn insert_owners_jobs(direct: &DirectConnections, same: Vec<Creation>) {
    let news: Vec<&NewJob> = same.iter().map(|creation| &creation.new).collect();
    match create_jobs(direct, &news).await {
        Ok(inserted) => {
            for creation in same {
                let answer = inserted.get(&creation.new.id.0).copied();
                creation.answer(Ok(answer));
            }
        }
        // Alone, or the database unavailable: one by one would fail alike.
        // The first gets the error; the others are as retryable (503), and
        // told the storage was full when it was.
        Err(error) if same.len() == 1 || error.is_unavailable() => {
            let full = matches!(error, StoreError::StorageFull(_));
            let mut errors = std::iter::once(error).chain(std::iter::repeat_with(move || match full {
                true => StoreError::StorageFull(sqlx::Error::Protocol(
                    "the database's storage was full for this request's group of creations".into(),
                )),
                false => StoreError::Interrupted("the database was unavailable for this request's group of creations"),
            }));
            for creation in same {
                creation.answer(Err(errors.next().unwrap_or_else(interrupted)));
            }
        }
        Err(error) => {
            tracing::debug!(%error, size = same.len(), "a group of creations failed; writing them one by one");
            for creation in same {
                let alone = create_jobs(direct, &[&creation.new]).await;
                let answer = alone.map(|inserted| inserted.get(&creation.new.id.0).copied());
                creation.answer(answer);
            }
        }
    }
}

/// Inserts one owner's jobs, each with its first attempt and its event,
/// unless its key is taken (the unique constraint decides, I1), in one
/// statement and one commit: the creation times of those inserted, by id.
async fn create_jobs(direct: &DirectConnections, news: &[&NewJob]) -> Result<HashMap<Uuid, DateTime<Utc>>> {
    let Some(first) = news.first() else { return Ok(HashMap::new()) };
    let column = |f: &dyn Fn(&NewJob) -> Option<String>| news.iter().map(|new| f(new)).collect::<Vec<_>>();
    let trace = |new: &NewJob| new.trace.as_ref().map(|t| t.traceparent.clone());
    let state = |new: &NewJob| new.trace.as_ref().and_then(|t| t.tracestate.clone());
    let mut lent = direct.acquire().await?;
    let inserting = sqlx::query_as(CREATE_JOBS.as_str())
        .bind(first.owner.as_str())
        .bind(news.iter().map(|new| new.id.0).collect::<Vec<_>>())
        .bind(news.iter().map(|new| new.idempotency_key.as_str()).collect::<Vec<_>>())
        .bind(news.iter().map(|new| &new.fingerprint.as_bytes()[..]).collect::<Vec<_>>())
        .bind(news.iter().map(|new| new.task.as_str()).collect::<Vec<_>>())
        .bind(news.iter().map(|new| &new.input).collect::<Vec<_>>())
        .bind(news.iter().map(|new| new.provider.as_str()).collect::<Vec<_>>())
        .bind(news.iter().map(|new| new.first_attempt_id.0).collect::<Vec<_>>())
        .bind(column(&|new| new.max_cost.map(|m| m.to_string())))
        .bind(column(&trace))
        .bind(column(&state))
        .bind(news.iter().map(|new| new.first_attempt_provider()).collect::<Vec<_>>())
        .fetch_all(lent.connection());
    let rows: std::result::Result<Vec<(Uuid, DateTime<Utc>)>, _> = answered(direct.patience(), inserting).await;
    lent.keep_after(&rows);
    Ok(rows?.into_iter().collect())
}
