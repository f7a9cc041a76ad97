//! L2 inputs: membership's view, join graces and the L2 tick; L2 starts and stops as
//! L2Advertisements appear and go.

use ferrolb_proto::membership::{self, MembershipKey};

use super::parts::l2::{View, conflict_events, membership_port, node_addresses, start_l2};
use super::state::State;
use crate::cluster;

impl State {
    /// The members L2 owners are elected from: membership's live set once settled
    /// (nobody before: a starting node would otherwise claim everything). Without
    /// L2Advertisements no election reads it, and it is empty.
    pub(super) fn live_members(&mut self) -> View {
        let now = self.now;
        match self.l2.as_mut() {
            Some(p) => {
                let live = p.usable_live(&self.metrics, now);
                p.used.clone_from(&live);
                p.report_blindness(self.cluster.as_ref().map(|c| &c.client), &self.opts.node_name);
                live.unwrap_or_default()
            }
            // L2Advertisements but no membership (it could not start): own nothing. No
            // L2Advertisement: no election reads the live set. An empty one, not every
            // Ready node's name: a plan of a BGP-only speaker would otherwise copy, sort
            // and compare 5 000 names (a third of its time at 1 000 Nodes).
            None => View::default(),
        }
    }

    /// Starts or stops membership and the L2 announcer as L2Advertisements appear or go.
    pub(super) async fn ensure_l2(&mut self) -> Result<(), String> {
        let wanted = !self.model.l2_advertisements.is_empty();
        match (wanted, self.l2.is_some()) {
            (true, false) => {
                let key = self.membership_key().await?;
                let part = start_l2(
                    &self.opts.node_name,
                    self.opts.membership_bind,
                    self.opts.heartbeat,
                    (&self.model, &self.metrics),
                    key,
                )?;
                if let Some(c) = &self.cluster {
                    c.gate.feed.set_l2(Some(part.announcer.status()));
                    let status = part.announcer.status();
                    tokio::spawn(conflict_events(status, c.client.clone(), self.opts.node_name.clone()));
                }
                self.l2 = Some(part);
            }
            (false, true) => {
                if let Some(p) = self.l2.take() {
                    if let Some(c) = &self.cluster {
                        c.gate.feed.set_l2(None);
                    }
                    tracing::info!("no L2Advertisement left: leaving membership, stopping ARP/NDP answers");
                    p.membership.leave().await;
                    p.announcer.shutdown().await;
                }
            }
            (true, true) => {
                if let Some(p) = &self.l2 {
                    p.membership
                        .set_nodes(&node_addresses(&self.model, membership_port(self.opts.membership_bind)));
                }
            }
            (false, false) => {}
        }
        Ok(())
    }

    /// The membership key: `--membership-key-file`, else (Kubernetes mode) the Secret.
    async fn membership_key(&self) -> Result<MembershipKey, String> {
        if let Some(f) = &self.opts.membership_key_file {
            return membership::read_key_file(f);
        }
        if let Some(c) = &self.cluster {
            return cluster::secrets::membership_key(&c.client, &c.namespace).await;
        }
        let ads: Vec<&str> = self.model.l2_advertisements.keys().map(String::as_str).collect();
        Err(format!(
            "L2Advertisement {} is configured but no --membership-key-file was given: L2 announcements need \
             membership; pass --membership-key-file FILE holding the cluster's key (at least 32 characters, the \
             same on every node)",
            ads.join(", ")
        ))
    }

    /// Starts or stops L2 as configured; a failure is logged once (per distinct error)
    /// and BGP goes on.
    pub(super) async fn ensure_l2_logged(&mut self) {
        match self.ensure_l2().await {
            Ok(()) => self.l2_error = None,
            Err(e) => {
                if self.l2_error.as_ref() != Some(&e) {
                    tracing::error!("{e}");
                }
                self.l2_error = Some(e);
            }
        }
        self.watch_secrets();
    }

    /// Re-elects when the live set, settledness or key-mismatch state changed.
    pub(super) async fn on_l2_change(&mut self) {
        let now = self.now;
        let Some(p) = self.l2.as_mut() else { return };
        if p.taken_over.has_changed().unwrap_or(false) {
            p.taken_over.borrow_and_update();
            // A false suspicion: clients may have followed the successor's announcement.
            p.announcer.renew();
        }
        let before = p.used.clone();
        let after = p.usable_live(&self.metrics, now);
        p.report_blindness(self.cluster.as_ref().map(|c| &c.client), &self.opts.node_name);
        if before == after {
            return;
        }
        let cause = View::cause(before.as_ref(), after.as_ref(), &self.opts.node_name);
        let reachable = |v: &Option<View>| v.as_ref().map(View::reachable);
        let (before, after) = (reachable(&before), reachable(&after));
        let joined = matches!((&before, &after), (Some(b), Some(a)) if a.difference(b).next().is_some());
        let left = matches!((&before, &after), (Some(b), Some(a)) if b.difference(a).next().is_some());
        self.replan(&cause).await;
        // A member left: an address this node yielded to it on the wire is this node's
        // again now, not once that member has been silent for a while (its hand-over
        // grace, then the conflict's release): answer it at once.
        if left
            && !joined
            && let Some(p) = &self.l2
        {
            p.announcer.renew();
        }
        // A member that joins may have been thought dead by itself or others for a
        // moment (a false suspicion on a starved node) and claimed our addresses;
        // clients may have followed its gratuitous ARP. Move them back.
        if joined && let Some(p) = &self.l2 {
            if !self.plan.l2.is_empty() {
                tracing::info!(reason = %cause.text, "L2: re-announcing the addresses this node still owns");
            }
            p.announcer.renew();
        }
    }
}
