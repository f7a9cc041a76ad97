//! Replays a recorded run's inputs ([`KubeOptions::record`](super::KubeOptions)) into a
//! fresh event loop state with no I/O of its own: no watchers, no API client, no
//! membership, no sessions to peers. What the plans depend on (the model the updates
//! build, the drain timers on the recorded clock) is replayed; what needs the API or the
//! network (readiness gates, Secrets, membership's view) is not, and those inputs find
//! no part to act on. So a run whose plans the replay does not reproduce depended on
//! something it did not record.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::input::Recorded;
use super::options::Options;
use super::parts::feed::FeedPart;
use super::state::State;
use crate::metrics::Metrics;
use crate::plan::Plan;

/// Feeds `inputs` in order to a Kubernetes-mode state built from `options` and returns
/// every plan it made; stops at the first `Stop` input.
pub async fn replay(options: Options, inputs: impl IntoIterator<Item = Recorded>) -> Vec<Plan> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut state = State::new(options, Arc::new(Metrics::new()));
    state.plans = Some(tx);
    state.feed = Some(FeedPart::default());
    for r in inputs {
        if state.process(r.at, r.input).await.is_break() {
            break;
        }
    }
    drop(state);
    let mut plans = Vec::new();
    while let Ok(p) = rx.try_recv() {
        plans.push(p);
    }
    plans
}
