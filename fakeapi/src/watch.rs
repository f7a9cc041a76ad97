//! WATCH streams: newline-delimited JSON events, bookmarks, 410 Gone.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use serde_json::{Value, json};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;

use crate::error::{ApiError, gone_status};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{LogEntry, Store, Target, WatchMsg, res_key};

/// What a watch request asked for.
#[derive(Debug, Clone)]
pub(crate) struct WatchRequest {
    pub(crate) target: Target,
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
    pub(crate) resource_version: Option<String>,
    pub(crate) bookmarks: bool,
    pub(crate) send_initial_events: bool,
    pub(crate) timeout: Option<Duration>,
    pub(crate) bookmark_interval: Duration,
}

/// One event's line, type first as the apiserver writes it (a JSON map would sort
/// `object` first; clients reading the type at the head of a line would miss it).
fn line(etype: &str, object: Value) -> Bytes {
    Bytes::from(format!("{{\"type\":{},\"object\":{object}}}\n", Value::from(etype)))
}

fn bookmark(t: &Target, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end && let Some(m) = metadata.as_object_mut() {
        m.insert("annotations".into(), json!({"k8s.io/initial-events-end": "true"}));
    }
    line(
        "BOOKMARK",
        json!({"kind": t.info.kind, "apiVersion": t.info.api_version(&t.version), "metadata": metadata}),
    )
}

/// Maps a store change to the event this watch sees, if any; selector edges become ADDED/DELETED.
fn translate(req: &WatchRequest, e: &LogEntry) -> Option<Bytes> {
    let t = &req.target;
    let (group, plural) = res_key(&t.info);
    if e.group != group || e.plural != plural {
        return None;
    }
    if t.namespace.as_deref().is_some_and(|ns| ns != e.namespace) {
        return None;
    }
    // Selectors see the object as this watch's version shows it.
    let matches = |o: &Value| {
        let shown = Store::show(t, o);
        req.labels.matches(&shown) && req.fields.matches(&shown)
    };
    let now = matches(&e.object);
    let etype = match e.etype {
        "MODIFIED" => match (e.old.as_ref().is_some_and(matches), now) {
            (true, true) => "MODIFIED",
            (false, true) => "ADDED",
            (true, false) => "DELETED",
            (false, false) => return None,
        },
        other if now => other,
        _ => return None,
    };
    Some(line(etype, Store::show(t, &e.object)))
}

struct WatchState {
    req: WatchRequest,
    pending: VecDeque<Bytes>,
    rx: broadcast::Receiver<WatchMsg>,
    /// Highest resourceVersion this stream has accounted for; what bookmarks report.
    seen_rv: u64,
    /// Where the stream started; periodic bookmarks come only once there is progress past it.
    start_rv: u64,
    ended: bool,
    deadline: Option<Instant>,
    next_bookmark: Instant,
}

/// Opens a watch; call with the store locked so no change falls between the backlog and the subscription.
pub(crate) fn open(
    store: &Store,
    req: WatchRequest,
) -> Result<impl Stream<Item = Bytes> + Send + 'static, ApiError> {
    let rx = store.tx.subscribe();
    let mut pending = VecDeque::new();
    let mut ended = false;
    let from = match req.resource_version.as_deref() {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<u64>().map_err(|_| ApiError::BadRequest(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let from = from.filter(|_| !req.send_initial_events);
    let start_rv = from.unwrap_or(store.rv);
    match from {
        // No resourceVersion (or sendInitialEvents): synthetic ADDED for the current state, then changes.
        None => {
            let (items, rv) = store.list(&req.target, &req.labels, &req.fields);
            pending.extend(items.into_iter().map(|o| line("ADDED", o)));
            if req.send_initial_events && req.bookmarks {
                pending.push_back(bookmark(&req.target, rv, true));
            }
        }
        Some(rv) => match store.events_since(rv) {
            Some(events) => pending.extend(events.iter().filter_map(|e| translate(&req, e))),
            None => {
                // As the real server does: 200 OK, then one ERROR event carrying a 410 Status.
                pending.push_back(line("ERROR", gone_status(rv)));
                ended = true;
            }
        },
    }
    let now = Instant::now();
    let state = WatchState {
        deadline: req.timeout.map(|d| now + d),
        next_bookmark: now + req.bookmark_interval,
        seen_rv: store.rv,
        start_rv,
        req,
        pending,
        rx,
        ended,
    };
    Ok(futures::stream::unfold(state, next_chunk))
}

async fn next_chunk(mut st: WatchState) -> Option<(Bytes, WatchState)> {
    loop {
        if let Some(b) = st.pending.pop_front() {
            return Some((b, st));
        }
        if st.ended {
            return None;
        }
        let deadline = st.deadline;
        let timeout = async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            msg = st.rx.recv() => match msg {
                Ok(WatchMsg::Event(e)) => {
                    st.seen_rv = st.seen_rv.max(e.rv);
                    if let Some(b) = translate(&st.req, &e) {
                        st.pending.push_back(b);
                    }
                }
                Ok(WatchMsg::Bookmark) => {
                    if st.req.bookmarks {
                        st.pending.push_back(bookmark(&st.req.target, st.seen_rv, false));
                    }
                }
                Ok(WatchMsg::Disconnect) | Err(RecvError::Closed) => return None,
                Err(RecvError::Lagged(_)) => {
                    // A watcher that cannot keep up loses its place, like a real watch cache overflow.
                    st.pending.push_back(line("ERROR", gone_status(st.seen_rv)));
                    st.ended = true;
                }
            },
            _ = tokio::time::sleep_until(st.next_bookmark) => {
                st.next_bookmark += st.req.bookmark_interval;
                // A real apiserver's watch cache has no bookmark for a watch until its
                // resourceVersion moved past the one the watch started from.
                if st.req.bookmarks && st.seen_rv > st.start_rv {
                    st.pending.push_back(bookmark(&st.req.target, st.seen_rv, false));
                }
            }
            _ = timeout => return None,
        }
    }
}
