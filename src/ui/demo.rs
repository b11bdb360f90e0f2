//! The demo (`/demo`): the article's story for a person. "Generate" makes a
//! `chat` job (prose, streamed) on the slow provider with one idempotency key per intent (made in
//! the browser, reused by every click and retry of that intent); while it
//! stalls, "Use fallback" adds an attempt on the fast provider with a key of
//! its own; the live timeline shows the race and its one winner. The
//! answer is read from the job's output (`/ui/api/jobs/{id}/output`, the
//! handler of `GET /jobs/{id}/output`): token by token when the task
//! streams. The intent (its key and text) is kept by the tab, so that a
//! reload mid-answer sends the same request again, finds the same job and
//! reads its output from the start. Below, "Draw" makes an `image` job
//! (a files task on a provider that calls back): a double click or a
//! reload finds the same job, and the picture onejob kept is shown.
//!
//! The page's script calls `/ui/api/jobs` and `/ui/api/jobs/{id}/attempts`
//! with the session's cookie and CSRF token: they are the handlers of
//! `POST /jobs` and `POST /jobs/{id}/attempts` themselves, acting for the
//! session's owner (see `super::router`), so a double click is settled by
//! the same unique constraint and admission rules as any API client's.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::{PageError, PageSession, page};
use crate::state::AppState;

/// The provider the demo's job starts on: it answers after a visible stall.
pub(crate) const SLOW: &str = "sim-slow";
/// The provider of the fallback attempt.
pub(crate) const FAST: &str = "sim-fast";
/// The demo's task: a text task that streams its prose answer.
pub(crate) const TASK: &str = "chat";
/// The demo's picture: a files task, on a provider that calls back.
pub(crate) const IMAGE_TASK: &str = "image";

/// `GET /demo`.
pub(crate) async fn show(
    State(app): State<AppState>,
    PageSession(session): PageSession,
) -> Result<Response, PageError> {
    let configured = |name: &str| app.catalog.provider(name).is_some();
    let context = minijinja::context! {
        slow => SLOW,
        fast => FAST,
        task => TASK,
        ready => configured(SLOW) && configured(FAST) && app.catalog.task(TASK).is_some(),
        cancel_losers => app.catalog.task(TASK).is_some_and(|task| task.settings.cancel_losers),
        streams => app.catalog.task(TASK).is_some_and(|task| task.settings.stream),
        image_task => IMAGE_TASK,
        image_provider => app.catalog.task(IMAGE_TASK).map(|task| task.settings.default_provider.clone()),
        image_ready => app.catalog.task(IMAGE_TASK).is_some_and(|task| task.settings.files.is_some()),
        csrf => &session.csrf,
        event_kinds => super::pages::event_kinds(),
    };
    Ok(page(StatusCode::OK, Some(&session), "Demo: one job per intent", "demo", "demo.html", context))
}
