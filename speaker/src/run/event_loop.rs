//! The event loop of both modes (holo shape): one task owns the [`State`]; each turn
//! takes one [`Input`] from the [`Sources`] and processes it, in one place.

use std::ops::ControlFlow;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::input::{Cause, Input, Recorded, Sources};
use super::shutdown::shutdown;
use super::state::State;
use crate::error::SpeakerError;

/// The event loop of both modes, then the shutdown sequence. With `record`, every
/// input is sent there as it is processed ([`super::replay`] feeds them back).
pub(super) async fn serve(
    mut state: State,
    mut sources: Sources,
    record: Option<mpsc::UnboundedSender<Recorded>>,
) -> Result<(), SpeakerError> {
    loop {
        state.metrics.beat();
        let input = sources.next(state.wakeups()).await;
        let at = Instant::now();
        if let Some(r) = &record {
            let _ = r.send(Recorded { at, input: input.clone() });
        }
        if state.process(at, input).await.is_break() {
            break;
        }
    }
    shutdown(state).await;
    Ok(())
}

impl State {
    /// Processes one input that came at `at`; Break once the speaker is to stop.
    pub(super) async fn process(&mut self, at: Instant, input: Input) -> ControlFlow<()> {
        self.now = at;
        match input {
            Input::Updates(batch) => self.on_updates(batch).await,
            Input::WatchersStopped => {
                tracing::error!("every API watcher stopped; keeping the announcements until SIGTERM");
            }
            Input::FileChanged => self.reload().await,
            Input::SecretsChanged => self.on_secrets().await,
            Input::PollFiles => self.poll_files().await,
            Input::Gate(signal) => self.on_gate_signal(signal).await,
            Input::GateHoldOver => self.end_gate_hold(),
            Input::DrainDue => {
                self.replan(&Cause::new("drain", "--drain-max-delay or the L2 handover grace passed")).await;
            }
            Input::Membership | Input::JoinDue | Input::L2Tick => self.on_l2_change().await,
            Input::L2Retry => {
                self.ensure_l2_logged().await;
                if self.l2.is_some() {
                    self.replan(&Cause::new("config", "L2 started")).await;
                }
            }
            Input::BgpTick => {
                self.bgp.tick();
                if self.bgp.routers_changed() {
                    self.replan(&Cause::new(
                        "config",
                        "a router was found or lost on an unnumbered BGP link",
                    ))
                    .await;
                }
            }
            Input::Stop(signal) => {
                tracing::info!("{signal}: closing sessions");
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }
}
