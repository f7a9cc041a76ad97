//! The Services waiting for a reconcile, each at most once, and each reconciled by one
//! reconcile at a time.
//!
//! Latest state wins: a reconcile reads the Service from the cache, never from the
//! queue, so a Service queued twice needs one reconcile, and the queue holds at most one
//! entry per Service. A channel would instead grow with every event: a relist queues
//! every Service, and each release re-queues every Service still waiting for an address,
//! so deleting 10 000 Services with 1 000 waiting for an address would queue ten million.
//!
//! A Service taken out ([`WorkQueue::stream`]) is running until its reconcile reports
//! [`WorkQueue::done`]. Queued meanwhile, it is not handed out a second time (two
//! reconciles of one Service would race on its status): it waits, and is queued again
//! when the running one is done, since that one may have read the Service before the
//! change.
//!
//! [`Retries`] holds the Services to reconcile again later (after a failed write, or
//! to try an allocation again), each once, at its earliest time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};

use crate::ipam::ServiceKey;

/// A first-in first-out set of Services to reconcile, with one consumer.
#[derive(Debug, Default)]
pub struct WorkQueue {
    inner: Mutex<Inner>,
    ready: Notify,
}

/// Each Service by its key, one allocation shared by the order and the set (and with the
/// cache and the allocator): a cold start queues every Service.
#[derive(Debug, Default)]
struct Inner {
    order: VecDeque<ServiceKey>,
    queued: HashSet<ServiceKey>,
    /// Taken out and not done; true when queued again meanwhile.
    running: HashMap<ServiceKey, bool>,
}

impl Inner {
    fn queue(&mut self, svc: ServiceKey) {
        self.queued.insert(svc.clone());
        self.order.push_back(svc);
    }
}

impl WorkQueue {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `svc` unless it is already waiting; a running one is queued again when it is done.
    pub fn push(&self, svc: ServiceKey) {
        let mut q = self.lock();
        if q.queued.contains(&svc) {
            return;
        }
        if let Some(again) = q.running.get_mut(&svc) {
            *again = true;
            return;
        }
        q.queue(svc);
        drop(q);
        self.ready.notify_one();
    }

    /// The reconcile of `svc` is over: it may be taken out again, and is queued again if
    /// it was pushed while it ran.
    pub fn done(&self, svc: &ServiceKey) {
        let mut q = self.lock();
        let Some((svc, again)) = q.running.remove_entry(svc) else { return };
        if !again {
            return;
        }
        q.queue(svc);
        drop(q);
        self.ready.notify_one();
    }

    /// How many Services wait (not counting those running).
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many Services are running.
    pub fn running(&self) -> usize {
        self.lock().running.len()
    }

    fn pop(&self) -> Option<ServiceKey> {
        let mut q = self.lock();
        let svc = q.order.pop_front()?;
        q.queued.remove(&svc);
        q.running.insert(svc.clone(), false);
        Some(svc)
    }

    /// The queued Services in order, each now running, waiting for more otherwise; for the
    /// one consumer, who reports [`WorkQueue::done`] for each.
    pub fn stream(self: Arc<Self>) -> impl Stream<Item = ServiceKey> + Send {
        futures::stream::unfold(self, |q| async move {
            loop {
                if let Some(svc) = q.pop() {
                    return Some((svc, q));
                }
                // A wake-up between `pop` and here leaves a permit: none is lost.
                q.ready.notified().await;
            }
        })
    }
}

/// Services to queue again at a later time, each once: scheduled twice, the earlier
/// time wins (as in kube's scheduler). A Service that changes meanwhile is queued at
/// once by its watch and again when its time comes; a reconcile is idempotent, so that
/// costs one more reconcile and no write.
#[derive(Default)]
pub struct Retries {
    timers: DelayQueue<ServiceKey>,
    keys: HashMap<ServiceKey, (delay_queue::Key, Instant)>,
}

impl Retries {
    /// Queues `svc` again `after` from now, unless it is already due sooner.
    pub fn schedule(&mut self, svc: ServiceKey, after: Duration) {
        let at = Instant::now() + after;
        match self.keys.get_mut(&svc) {
            Some((_, due)) if *due <= at => {}
            Some((timer, due)) => {
                self.timers.reset_at(timer, at);
                *due = at;
            }
            None => {
                let timer = self.timers.insert_at(svc.clone(), at);
                self.keys.insert(svc, (timer, at));
            }
        }
    }

    /// How many Services wait for their time.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The next Service whose time has come; pending while none is scheduled.
    pub fn poll_due(&mut self, cx: &mut Context<'_>) -> Poll<ServiceKey> {
        match self.timers.poll_expired(cx) {
            Poll::Ready(Some(expired)) => {
                let svc = expired.into_inner();
                self.keys.remove(&svc);
                Poll::Ready(svc)
            }
            // Empty: `insert_at` wakes the task that polled it last.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }

    /// The next Service whose time has come.
    pub async fn due(&mut self) -> ServiceKey {
        std::future::poll_fn(|cx| self.poll_due(cx)).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use futures::{FutureExt, StreamExt};

    use super::*;

    fn svc(name: &str) -> ServiceKey {
        ServiceKey::new("default", name)
    }

    #[tokio::test]
    async fn a_service_queued_many_times_waits_once_in_first_come_order() {
        let q = Arc::new(WorkQueue::default());
        for _ in 0..10_000 {
            q.push(svc("a"));
            q.push(svc("b"));
        }
        assert_eq!(q.len(), 2);
        let mut s = Box::pin(q.clone().stream());
        assert_eq!(s.next().await, Some(svc("a")));
        q.done(&svc("a"));
        // Done, it may be queued again (a change after its reconcile).
        q.push(svc("a"));
        assert_eq!(s.next().await, Some(svc("b")));
        assert_eq!(s.next().await, Some(svc("a")));
        assert!(q.is_empty());
        let waiting = tokio::spawn(async move { s.next().await });
        tokio::task::yield_now().await;
        q.push(svc("c"));
        assert_eq!(waiting.await.unwrap(), Some(svc("c")));
    }

    #[tokio::test]
    async fn a_running_service_is_not_handed_out_twice_and_a_change_meanwhile_is_not_lost() {
        let q = Arc::new(WorkQueue::default());
        q.push(svc("a"));
        let mut s = Box::pin(q.clone().stream());
        assert_eq!(s.next().await, Some(svc("a")));
        assert_eq!(q.running(), 1);
        // a changes while its reconcile runs: it waits for that reconcile to end.
        q.push(svc("a"));
        q.push(svc("a"));
        assert!(q.is_empty());
        assert_eq!(s.next().now_or_never(), None, "not handed out while it runs");
        q.done(&svc("a"));
        assert_eq!(q.len(), 1, "queued again, once, when its (possibly stale) reconcile ended");
        assert_eq!(s.next().await, Some(svc("a")));
        // Done without a change meanwhile: not queued again.
        q.done(&svc("a"));
        assert!(q.is_empty());
        assert_eq!(q.running(), 0);
        assert_eq!(s.next().now_or_never(), None);
        // One that is not running changes nothing.
        q.done(&svc("elsewhere"));
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_comes_once_at_the_earliest_time_it_was_given() {
        let mut r = Retries::default();
        assert!(r.due().now_or_never().is_none(), "nothing scheduled");
        r.schedule(svc("a"), Duration::from_secs(300));
        r.schedule(svc("b"), Duration::from_secs(10));
        // Sooner wins; later is ignored.
        r.schedule(svc("a"), Duration::from_secs(2));
        r.schedule(svc("a"), Duration::from_secs(60));
        assert_eq!(r.len(), 2);
        let start = Instant::now();
        assert_eq!(r.due().await, svc("a"));
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(r.due().await, svc("b"));
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert!(r.is_empty());
        let later = tokio::time::timeout(Duration::from_secs(600), r.due()).await;
        assert!(later.is_err(), "a's later times were dropped, not kept: {later:?}");
    }
}
