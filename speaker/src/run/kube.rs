//! Kubernetes mode: the model comes from watchers over the API.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::event_loop::serve;
use super::input::Sources;
use super::options::KubeOptions;
use super::parts::cluster::ClusterPart;
use super::parts::feed::FeedPart;
use super::parts::gate::GatePart;
use super::state::State;
use crate::announce::AnnouncedFeed;
use crate::cluster;
use crate::cluster::pod_conditions::PodConditions;
use crate::cluster::status;
use crate::error::SpeakerError;
use crate::metrics::Metrics;

/// Runs Kubernetes mode until SIGTERM or SIGINT: the model comes from watchers over the
/// API; nothing is announced (and no ServiceAnnouncement touched) before every watched
/// kind has been listed once; an unreachable apiserver changes no announcement.
///
/// Tasks: the watchers (one per kind, into one channel), the status writer, the
/// readiness gate's pod watch and writer, the Secret watch, the announced feed; L2
/// starts membership and the announcer when L2Advertisements exist.
pub async fn run_kube(
    opts: KubeOptions,
    client: kube::Client,
    metrics: Arc<Metrics>,
) -> Result<(), SpeakerError> {
    let sources = Sources::new()?;
    let (tx, updates) = cluster::channel();
    let watchers = cluster::spawn_watchers(&client, &tx, &opts.options.node_name, &opts.namespace);
    drop(tx);
    let status = status::spawn(client.clone(), &opts.options.node_name, metrics.clone());
    let mut state = State::new(opts.options, metrics.clone());
    state.plans = opts.plans;
    tracing::info!(node = %state.opts.node_name, namespace = %opts.namespace, "speaker started in Kubernetes mode; listing");
    let feed = AnnouncedFeed::spawn(state.bgp.announced());
    let gate = GatePart {
        conditions: PodConditions::start_with_metrics(
            client.clone(),
            &state.opts.node_name,
            metrics.readiness.clone(),
        ),
        announced: feed.subscribe(),
        feed,
        remote: None,
        remote_view: None,
        pods: Vec::new(),
        hold: None,
    };
    let secrets = cluster::secrets::SecretWatch::new(client.clone());
    state.feed = Some(FeedPart::default());
    state.cluster = Some(ClusterPart {
        gate,
        client,
        namespace: opts.namespace,
        status,
        tracker: status::Tracker::default(),
        password_refs: BTreeMap::new(),
        secrets_seen: secrets.subscribe(),
        secrets,
        watchers,
    });
    serve(state, sources.with_updates(updates), opts.record).await
}
