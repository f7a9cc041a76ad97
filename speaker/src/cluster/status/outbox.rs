//! Where the event loop leaves status changes for the writer task. Changes are merged
//! per Service as they come, so a writer that fell behind (its request limit, a slow
//! apiserver) finds only each Service's latest status: a Service created and deleted
//! meanwhile costs it nothing. The loop never waits on the writer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use super::desired::Update;

#[derive(Debug, Default)]
struct Shared {
    pending: Mutex<Update>,
    notify: Notify,
    closed: AtomicBool,
}

impl Shared {
    fn pending(&self) -> std::sync::MutexGuard<'_, Update> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The event loop's end: [`Outbox::send`]. Dropping it stops the writer.
#[derive(Debug)]
pub struct Outbox(Arc<Shared>);

/// The writer's end.
#[derive(Debug)]
pub(super) struct Inbox(Arc<Shared>);

/// A connected pair.
pub(super) fn pair() -> (Outbox, Inbox) {
    let shared = Arc::new(Shared::default());
    (Outbox(shared.clone()), Inbox(shared))
}

impl Outbox {
    /// Leaves `update` for the writer: a complete set replaces whatever waits, a partial
    /// one overrides the Services it names.
    pub fn send(&self, update: Update) {
        {
            let mut p = self.0.pending();
            if update.complete {
                *p = update;
            } else {
                p.services.extend(update.services);
            }
        }
        self.0.notify.notify_one();
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.notify.notify_one();
    }
}

impl Inbox {
    /// Everything waiting, leaving nothing.
    pub(super) fn take(&self) -> Update {
        std::mem::take(&mut *self.0.pending())
    }

    /// Whether something waits (a newer status than the writer holds).
    pub(super) fn has_pending(&self) -> bool {
        let p = self.0.pending();
        p.complete || !p.services.is_empty()
    }

    /// Waits for the next send; false once the event loop has gone and nothing waits.
    pub(super) async fn wait(&self) -> bool {
        if !self.0.closed.load(Ordering::Acquire) {
            self.0.notify.notified().await;
        }
        !self.0.closed.load(Ordering::Acquire) || self.has_pending()
    }
}
