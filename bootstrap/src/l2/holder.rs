//! This member's side of the L2 election, sans IO: whether it should hold the VIP now.
//!
//! The owner is the rendezvous winner among live, healthy members; with none, whoever
//! holds the VIP keeps it. A holder that is no longer elected hands over **make before
//! break**: it keeps the VIP until the successor has announced it on the wire (a
//! [`Input::Claim`]: gratuitous ARP / unsolicited NA for the VIP from another MAC, not
//! yet answered by an announcement of its own), or until the same successor stayed
//! elected for [`HANDOVER_WAIT`].
//!
//! Announcements answer each other: taking the VIP sends the takeover burst, which
//! answers every earlier announcement by others; the elected holder answers a later one
//! by announcing again ([`Event::Defend`], at most every [`DEFEND_INTERVAL`]), so a
//! member that took the VIP from a lagging view lets go once its view agrees. An answered
//! announcement never counts for a handover: its sender may have let go since.
//!
//! With nobody healthy two members can still end up holding: a member healthy for a
//! moment after the holder had already turned unhealthy takes the VIP, and the holder
//! never saw it elected. The announcement names the member (its MAC, looked up in the
//! neighbour table): of the two, the one the rendezvous hash prefers answers, and the
//! other lets go once the preferred one announced again [`TIE_WAIT`] after its own
//! announcement — not on the first one, which may come from a holder that is letting
//! go to it.
//!
//! Why not release on the view alone: views are not simultaneous. Two members turning
//! unhealthy within a millisecond of each other (an etcd outage fails every /readyz at
//! once) can each still see the other under its healthy name for a moment — a stale
//! entry, gone when the other's rejoin or SWIM's failure detection reaches us. A holder
//! releasing on that view hands the VIP to a member that never takes it, and nobody
//! holds it. A successor that really is healthy takes the VIP at once and says so.
//!
//! Driven like the other protocol cores: [`Holder::handle`] with the time and an input,
//! [`Holder::holds`] for the desired state, [`Holder::poll_event`] for what to log or
//! send, [`Holder::poll_timeout`] for when to call `handle(now, Input::Timeout)`.

use std::collections::{BTreeSet, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ferrolb_proto::election;

/// A holder whose successor never announces the VIP releases it after the successor
/// stayed elected this long: longer than SWIM needs to drop a stale entry (failure
/// detection, well under a second with the default timings), so a successor still
/// elected after it is real.
pub const HANDOVER_WAIT: Duration = Duration::from_secs(2);

/// A holder answers another node's announcement of the VIP with its own (re-sends the
/// takeover burst) at most this often.
pub const DEFEND_INTERVAL: Duration = Duration::from_secs(1);

/// With nobody healthy, of two holders the one the rendezvous hash does not prefer lets
/// go when the other announces the VIP this long or longer after its own announcement:
/// proof that the other one saw it and kept the VIP.
pub const TIE_WAIT: Duration = Duration::from_secs(1);

/// What the holder learns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A settled membership view: the live, healthy members (this one included when it
    /// is healthy).
    View(BTreeSet<String>),
    /// Another node announced the VIP (gratuitous ARP / unsolicited NA from another
    /// MAC): when it was seen, and the member it came from if known.
    Claim {
        /// When it was seen.
        at: Instant,
        /// The member whose MAC it gave (None: not a member, or not known).
        by: Option<String>,
    },
    /// [`Holder::poll_timeout`] passed.
    Timeout,
}

/// Why a holder let the VIP go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The successor announced the VIP.
    SuccessorAnnounced,
    /// The successor stayed elected for [`HANDOVER_WAIT`] without an announcement seen.
    Waited,
    /// Nobody is healthy and another member holds the VIP too: the one of the two the
    /// rendezvous hash prefers keeps it.
    OtherHolderKeeps,
}

impl Release {
    /// For logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Release::SuccessorAnnounced => "the successor announced it",
            Release::Waited => "the successor stayed elected for the handover wait",
            Release::OtherHolderKeeps => "nobody is healthy and another holder is preferred",
        }
    }
}

/// What the driver logs or does besides applying [`Holder::holds`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Another member is elected; the VIP stays here until it announces it.
    HandingOver {
        /// The elected successor.
        to: String,
    },
    /// The handover ended: the VIP is to be released.
    Released(Release),
    /// Announce the VIP again: another node announced it while this one is the owner
    /// (or, with nobody healthy, the preferred of two holders).
    Defend,
}

/// This member's holding state (see the module).
#[derive(Debug)]
pub struct Holder {
    me: String,
    ip: IpAddr,
    members: Vec<String>,
    view: BTreeSet<String>,
    holds: bool,
    /// Announcements by other nodes up to this instant are answered by one of ours (the
    /// takeover burst, or a defence): only later ones count for a handover.
    answered: Option<Instant>,
    /// The latest announcement by another node, and the member it came from if known.
    claimed: Option<Instant>,
    claimed_by: Option<String>,
    /// The successor elected while this member holds, and since when.
    handover: Option<(String, Instant)>,
    defended: Option<Instant>,
    /// When this member last announced the VIP (took it, or answered).
    announced: Option<Instant>,
    events: VecDeque<Event>,
}

impl Holder {
    /// Member `me` of `members` for `ip`, holding nothing and seeing nobody.
    pub fn new(me: &str, ip: IpAddr, members: Vec<String>) -> Self {
        Holder {
            me: me.to_string(),
            ip,
            members,
            view: BTreeSet::new(),
            holds: false,
            answered: None,
            claimed: None,
            claimed_by: None,
            handover: None,
            defended: None,
            announced: None,
            events: VecDeque::new(),
        }
    }

    /// Whether this member should hold the VIP now.
    pub fn holds(&self) -> bool {
        self.holds
    }

    /// The owner elected by the current view (None: no member is healthy).
    pub fn elected(&self) -> Option<&str> {
        let candidates = self.members.iter().filter(|m| self.view.contains(*m)).map(String::as_str);
        election::owner(self.ip, candidates)
    }

    /// Processes one input.
    pub fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::View(view) => self.view = view,
            Input::Claim { at, by } => {
                if Some(at) >= self.claimed {
                    self.claimed = Some(at);
                    self.claimed_by = by;
                }
            }
            Input::Timeout => {}
        }
        self.evaluate(now);
    }

    /// Another node announced the VIP after our last announcement.
    fn unanswered_claim(&self) -> bool {
        matches!((self.claimed, self.answered), (Some(c), Some(a)) if c > a)
    }

    /// With nobody healthy, another member that holds the VIP too (it announced it
    /// after our last announcement): whether the rendezvous hash prefers us to it.
    /// None: no such member known.
    fn preferred_to_other_holder(&self) -> Option<bool> {
        let other =
            self.claimed_by.as_deref().filter(|m| *m != self.me && self.members.iter().any(|x| x == m))?;
        let unanswered = self.holds && self.elected().is_none() && self.unanswered_claim();
        unanswered.then(|| election::owner(self.ip, [self.me.as_str(), other]) == Some(self.me.as_str()))
    }

    /// The preferred other holder announced the VIP [`TIE_WAIT`] or more after our last
    /// announcement: it saw ours and kept the VIP (a member handing the VIP over to us,
    /// from a view that still shows us healthy, lets go within milliseconds of seeing
    /// ours and announces nothing after).
    fn other_holder_kept(&self) -> bool {
        matches!((self.claimed, self.announced), (Some(c), Some(a)) if c >= a + TIE_WAIT)
    }

    /// When this holder answers an announcement by another node (None: none to
    /// answer): at once, or [`DEFEND_INTERVAL`] after the last answer. The elected
    /// holder answers; with nobody healthy, the preferred of two holders does.
    fn defence_due(&self) -> Option<Instant> {
        let elected = self.holds && self.elected() == Some(self.me.as_str()) && self.unanswered_claim();
        if !elected && self.preferred_to_other_holder() != Some(true) {
            return None;
        }
        self.defended.map(|t| t + DEFEND_INTERVAL).or(self.claimed)
    }

    fn defend_if_due(&mut self, now: Instant) {
        if self.defence_due().is_some_and(|due| now >= due) {
            self.defended = Some(now);
            self.announced = Some(now);
            self.answered = self.claimed;
            self.events.push_back(Event::Defend);
        }
    }

    fn release(&mut self, why: Release) {
        self.holds = false;
        self.handover = None;
        self.events.push_back(Event::Released(why));
    }

    fn evaluate(&mut self, now: Instant) {
        let elected = self.elected().map(str::to_string);
        match elected {
            Some(owner) if owner == self.me => {
                self.handover = None;
                if !self.holds {
                    // Our takeover burst answers whoever announced it before.
                    self.holds = true;
                    self.answered = Some(now);
                    self.announced = Some(now);
                } else {
                    // The owner answers another holder (one that thought it dead, or
                    // elected itself from a view that lags): clients it moved come
                    // back, and it lets go once its view agrees.
                    self.defend_if_due(now);
                }
            }
            None => {
                self.handover = None;
                // Nobody healthy, and another member took the VIP too (it was healthy
                // for a moment while we were already unhealthy, so we never saw it
                // elected): both compute the same preference; the preferred one
                // answers, the other lets go once it sees it kept the VIP.
                match self.preferred_to_other_holder() {
                    Some(true) => self.defend_if_due(now),
                    Some(false) if self.other_holder_kept() => self.release(Release::OtherHolderKeeps),
                    _ => {}
                }
            }
            Some(_) if !self.holds => self.handover = None,
            Some(successor) => {
                let since = match &self.handover {
                    Some((to, since)) if *to == successor => *since,
                    _ => {
                        self.events.push_back(Event::HandingOver { to: successor.clone() });
                        now
                    }
                };
                let why = if self.unanswered_claim() {
                    Some(Release::SuccessorAnnounced)
                } else if now >= since + HANDOVER_WAIT {
                    Some(Release::Waited)
                } else {
                    None
                };
                if let Some(why) = why {
                    self.release(why);
                } else {
                    self.handover = Some((successor, since));
                }
            }
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to call `handle(now, Input::Timeout)` (None: no timer runs).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let handover = self.handover.as_ref().map(|(_, since)| *since + HANDOVER_WAIT);
        [handover, self.defence_due()].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    use ferrolb_testkit::names as set;

    fn vip() -> IpAddr {
        "192.0.2.200".parse().unwrap()
    }

    fn members(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn owner_of(names: &[&str]) -> String {
        election::owner(vip(), names.iter().copied()).unwrap().to_string()
    }

    /// Member `me` of `all`, holding after a view in which every member is healthy when
    /// it is the winner.
    fn holder(me: &str, all: &[&str], t: Instant) -> Holder {
        let mut h = Holder::new(me, vip(), members(all));
        h.handle(t, Input::View(set(all)));
        h
    }

    fn claim(at: Instant, by: &str) -> Input {
        Input::Claim { at, by: Some(by.to_string()) }
    }

    fn events(h: &mut Holder) -> Vec<Event> {
        std::iter::from_fn(|| h.poll_event()).collect()
    }

    #[test]
    fn exactly_one_healthy_member_holds() {
        let all = ["node1", "node2", "node3"];
        let t = Instant::now();
        let holders: Vec<&str> = all.iter().copied().filter(|m| holder(m, &all, t).holds()).collect();
        assert_eq!(holders, vec![owner_of(&all).as_str()]);
    }

    #[test]
    fn with_no_healthy_member_the_holder_keeps_it_and_nobody_else_takes_it() {
        let all = ["node1", "node2"];
        let t = Instant::now();
        let owner = owner_of(&all);
        let mut h = holder(&owner, &all, t);
        h.handle(t + Duration::from_secs(1), Input::View(BTreeSet::new()));
        h.handle(t + Duration::from_secs(60), Input::Timeout);
        assert!(h.holds());
        assert_eq!(h.poll_timeout(), None);
        let other = all.iter().find(|m| **m != owner).unwrap();
        let mut o = Holder::new(other, vip(), members(&all));
        o.handle(t, Input::View(BTreeSet::new()));
        assert!(!o.holds(), "a cold start with nobody healthy takes nothing");
    }

    #[test]
    fn non_members_are_never_candidates() {
        let t = Instant::now();
        let mut h = Holder::new("node1", vip(), members(&["node1"]));
        h.handle(t, Input::View(set(&["node1", "intruder"])));
        assert!(h.holds());
        let mut i = Holder::new("intruder", vip(), members(&["node1"]));
        i.handle(t, Input::View(set(&["node1", "intruder"])));
        assert!(!i.holds());
    }

    /// The race: both members turn unhealthy together; the holder's first view after its
    /// own rejoin still shows the other under its healthy name (stale), then nobody.
    /// Releasing on that view left nobody holding the VIP (the successor never took it).
    #[test]
    fn a_stale_healthy_successor_does_not_take_the_vip_away() {
        let all = ["node1", "node2"];
        let t = Instant::now();
        let owner = owner_of(&all);
        let other = all.iter().find(|m| **m != owner).unwrap();
        let mut h = holder(&owner, &all, t);
        h.handle(t + Duration::from_millis(5), Input::View(set(&[other])));
        assert!(h.holds(), "released on a view alone");
        assert_eq!(events(&mut h), vec![Event::HandingOver { to: other.to_string() }]);
        assert_eq!(h.poll_timeout(), Some(t + Duration::from_millis(5) + HANDOVER_WAIT));
        h.handle(t + Duration::from_millis(8), Input::View(BTreeSet::new()));
        assert!(h.holds());
        assert_eq!(h.poll_timeout(), None, "the handover is off");
        h.handle(t + HANDOVER_WAIT * 3, Input::Timeout);
        assert!(h.holds(), "with no healthy member the holder keeps the VIP");
        assert!(events(&mut h).is_empty());
    }

    /// Make before break: a healthy successor takes the VIP and announces it; the old
    /// holder lets go when it sees that announcement, not before.
    #[test]
    fn the_holder_releases_when_the_successor_announces() {
        let all = ["node1", "node2"];
        let t = Instant::now();
        let owner = owner_of(&all);
        let other = all.iter().find(|m| **m != owner).unwrap();
        let ms = |n: u64| t + Duration::from_millis(n);
        let mut h = holder(&owner, &all, t);
        let mut s = Holder::new(other, vip(), members(&all));
        s.handle(t, Input::View(set(&all)));
        assert!(!s.holds());
        // The owner turns unhealthy: the successor sees it leave and takes the VIP.
        s.handle(ms(1), Input::View(set(&[other])));
        assert!(s.holds());
        // The old owner's rejoin settles (the successor's announcement is on its way).
        h.handle(ms(3), Input::View(set(&[other])));
        assert!(h.holds());
        h.handle(ms(4), claim(ms(2), other));
        assert!(!h.holds());
        assert_eq!(
            events(&mut h),
            vec![Event::HandingOver { to: other.to_string() }, Event::Released(Release::SuccessorAnnounced)]
        );
        assert_eq!(h.poll_timeout(), None);
    }

    /// An announcement the owner answered (from a member that wrongly thought it dead)
    /// does not count for a later handover: its sender lets go on the answer.
    #[test]
    fn an_announcement_answered_by_the_owner_does_not_count_later() {
        let all = ["node1", "node2"];
        let t = Instant::now();
        let owner = owner_of(&all);
        let other = all.iter().find(|m| **m != owner).unwrap();
        let ms = |n: u64| t + Duration::from_millis(n);
        let mut h = holder(&owner, &all, t);
        h.handle(ms(100), claim(ms(100), other));
        assert_eq!(events(&mut h), vec![Event::Defend], "the owner answers another node's announcement");
        assert_eq!(h.poll_timeout(), None);
        h.handle(ms(200), claim(ms(200), other));
        assert!(events(&mut h).is_empty(), "at most one answer per DEFEND_INTERVAL");
        assert_eq!(h.poll_timeout(), Some(ms(100) + DEFEND_INTERVAL));
        h.handle(ms(100) + DEFEND_INTERVAL, Input::Timeout);
        assert_eq!(events(&mut h), vec![Event::Defend], "the later announcement is answered too");
        assert_eq!(h.poll_timeout(), None);
        // Much later the race: a stale healthy successor, then nobody healthy.
        h.handle(ms(60_000), Input::View(set(&[other])));
        assert!(h.holds(), "released on an announcement it had already answered");
        h.handle(ms(60_010), Input::View(BTreeSet::new()));
        assert!(h.holds());
    }

    /// Views lag: two members each elected themselves and announce; the one whose view
    /// then elects the other lets go at once on an announcement it did not answer yet.
    #[test]
    fn an_announcement_not_yet_answered_counts_for_the_handover() {
        let all = ["node1", "node2"];
        let t = Instant::now();
        let owner = owner_of(&all);
        let other = all.iter().find(|m| **m != owner).unwrap();
        let ms = |n: u64| t + Duration::from_millis(n);
        // `other` alone healthy in its view: it takes the VIP.
        let mut h = Holder::new(other, vip(), members(&all));
        h.handle(t, Input::View(set(&[other])));
        h.handle(ms(1), claim(ms(1), &owner));
        h.handle(ms(2), claim(ms(2), &owner));
        assert_eq!(events(&mut h), vec![Event::Defend]);
        h.handle(ms(300), Input::View(set(&all)));
        assert!(!h.holds());
        assert_eq!(
            events(&mut h),
            vec![Event::HandingOver { to: owner.clone() }, Event::Released(Release::SuccessorAnnounced)]
        );
    }

    /// Without an announcement (lost, or no raw socket) the handover ends after
    /// HANDOVER_WAIT of the same successor, so two holders never last longer.
    #[test]
    fn without_an_announcement_the_holder_releases_after_the_handover_wait() {
        let all = ["node1", "node2", "node3"];
        let t = Instant::now();
        let owner = owner_of(&all);
        let rest: Vec<&str> = all.iter().copied().filter(|m| *m != owner).collect();
        let successor = owner_of(&rest);
        let mut h = holder(&owner, &all, t);
        h.handle(t, Input::View(set(&rest)));
        assert_eq!(h.poll_timeout(), Some(t + HANDOVER_WAIT));
        h.handle(t + HANDOVER_WAIT / 2, Input::Timeout);
        assert!(h.holds());
        // Another successor restarts the wait.
        let second = rest.iter().copied().find(|m| *m != successor).unwrap();
        h.handle(t + HANDOVER_WAIT / 2, Input::View(set(&[second])));
        assert_eq!(h.poll_timeout(), Some(t + HANDOVER_WAIT / 2 + HANDOVER_WAIT));
        h.handle(t + HANDOVER_WAIT, Input::Timeout);
        assert!(h.holds());
        h.handle(t + HANDOVER_WAIT / 2 + HANDOVER_WAIT, Input::Timeout);
        assert!(!h.holds());
        assert_eq!(
            events(&mut h),
            vec![
                Event::HandingOver { to: successor },
                Event::HandingOver { to: second.to_string() },
                Event::Released(Release::Waited)
            ]
        );
    }

    /// With nobody healthy an announcement by another node is kept (not answered): a
    /// member turning healthy takes the VIP and may announce it before the holder's
    /// view shows it.
    #[test]
    fn an_announcement_seen_before_the_successor_counts() {
        let all = ["node1", "node2"];
        let t = Instant::now();
        let owner = owner_of(&all);
        let other = all.iter().find(|m| **m != owner).unwrap();
        let ms = |n: u64| t + Duration::from_millis(n);
        let mut h = holder(&owner, &all, t);
        h.handle(ms(10), Input::View(BTreeSet::new()));
        h.handle(ms(20), Input::Claim { at: ms(20), by: None });
        assert!(h.holds() && events(&mut h).is_empty(), "nobody healthy: keep, answer nothing");
        h.handle(ms(21), Input::View(set(&[other])));
        assert!(!h.holds());
    }

    /// Nobody healthy and two holders: the holder turned unhealthy before it saw the
    /// other member elected, and the other one, healthy for a moment, took the VIP. The
    /// preferred one answers; the other lets go when the preferred one announces again
    /// TIE_WAIT after its own announcement (not on the first, which may come from a
    /// holder letting go to it).
    #[test]
    fn with_nobody_healthy_two_holders_settle_on_the_preferred_one() {
        let all = ["node1", "node2"];
        let t = Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        let keeper = owner_of(&all);
        let other = all.iter().copied().find(|m| *m != keeper).unwrap();
        let mut k = holder(&keeper, &all, t);
        let mut o = Holder::new(other, vip(), members(&all));
        o.handle(ms(500), Input::View(set(&[other])));
        assert!(o.holds());
        k.handle(ms(501), Input::View(BTreeSet::new()));
        o.handle(ms(502), Input::View(BTreeSet::new()));
        assert!(k.holds() && o.holds());
        // Each sees the other's announcement (the keeper's older takeover burst goes on).
        k.handle(ms(503), claim(ms(503), other));
        assert_eq!(events(&mut k), vec![Event::Defend], "the preferred holder answers");
        o.handle(ms(504), claim(ms(504), &keeper));
        assert!(o.holds(), "let go on an announcement that may come from a holder letting go");
        o.handle(ms(504) + TIE_WAIT, claim(ms(503) + TIE_WAIT, &keeper));
        assert!(!o.holds());
        assert_eq!(events(&mut o), vec![Event::Released(Release::OtherHolderKeeps)]);
        assert!(k.holds());
        // The one that lost the tie announces nothing more; the keeper keeps it.
        k.handle(ms(10_000), Input::Timeout);
        assert!(k.holds());
    }

    /// The preferred member's announcement may come from a holder handing the VIP over
    /// to us (its view still shows us healthy): it lets go on our announcement, so an
    /// announcement of it within TIE_WAIT of ours does not make us let go.
    #[test]
    fn with_nobody_healthy_an_announcement_right_after_ours_is_not_a_kept_vip() {
        let all = ["node1", "node2"];
        let t = Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        let preferred = owner_of(&all);
        let me = all.iter().copied().find(|m| *m != preferred).unwrap();
        let mut h = Holder::new(me, vip(), members(&all));
        h.handle(ms(1), Input::View(set(&[me])));
        assert!(h.holds());
        h.handle(ms(3), Input::View(BTreeSet::new()));
        h.handle(ms(4), claim(ms(2), &preferred));
        h.handle(ms(60), claim(ms(60), &preferred));
        assert!(h.holds(), "nobody would hold the VIP if the other one was letting go");
        // A member not known (another MAC, not in the neighbour table) never decides.
        h.handle(ms(5000), Input::Claim { at: ms(5000), by: None });
        assert!(h.holds());
        h.handle(ms(5001), claim(ms(5001), "intruder"));
        assert!(h.holds());
    }
}
