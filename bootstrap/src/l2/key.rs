//! Following `spec.membershipKeyFile` while bootstrap runs, as the speaker follows its
//! key file (`speaker/src/run/on_rotation.rs`): the file is re-read every [`KEY_FILE_POLL`]
//! and a changed valid key goes to the running membership instance, which rotates to it
//! without a split ([`ferrolb_proto::membership::auth::Keyring`]: accepted at once, sealed
//! with after the rotation window W, the old key retired after 2W). A key that cannot be
//! used leaves the current one in force, with one error line and
//! `ferrolb_membership_key_changes{result="rejected"}` counted, once per distinct error.
//!
//! **Rejoins.** A health change replaces the membership instance (see [`super`]), and a
//! new instance knows only the keys it is given: `set_key` schedules a key from the
//! moment it is called. [`KeySchedule`] remembers the keys read from the file and when,
//! and a new instance starts with the key the members seal with by then. Once the latest
//! key was learned at least W ago it starts with that key alone: the other members, which
//! learned it within W of this node, seal with it and retire the old one by 2W, so an
//! instance started with the original key would be unreadable. Within W it starts with
//! the key before and is handed the latest at once, accepting both from the start like
//! the instance it replaces.
//!
//! Residual edges, inherent in a schedule that restarts at the rejoin: a rejoin within W
//! of a change seals with the old key up to W longer than the replaced instance would
//! have (the others still accept it when they learned the key about when this node did);
//! a rejoin just past W cannot read a member that learned the key later than this node
//! until that member seals with it (for the spread between the members' learning
//! moments: how the file was distributed, plus up to one [`KEY_FILE_POLL`]); and of keys
//! changed faster than W, a rejoin skips all but the newest.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferrolb_proto::membership::{
    MembershipConfig, MembershipHandle, MembershipKey, MembershipMetrics, Reread,
};

/// How often the key file is re-read (the speaker's `FILE_POLL`).
pub const KEY_FILE_POLL: Duration = Duration::from_secs(2);

/// The keys read from the key file, each with when: what a new instance starts with.
#[derive(Debug)]
pub struct KeySchedule {
    window: Duration,
    /// The key sealed with at the last look: the first, or one learned at least W before.
    sealing: MembershipKey,
    /// The keys learned after it, in order, each with when. The file is read every
    /// [`KEY_FILE_POLL`], so they are W / [`KEY_FILE_POLL`] at most.
    learned: VecDeque<(MembershipKey, Instant)>,
}

impl KeySchedule {
    /// A schedule holding `key`, the one membership started with; a change is sealed with
    /// `window` after it was learned.
    pub fn new(key: MembershipKey, window: Duration) -> Self {
        KeySchedule { window, sealing: key, learned: VecDeque::new() }
    }

    /// `key` was read at `now`: true when it differs from the latest key (hand it to the
    /// running instance's `set_key`).
    pub fn learn(&mut self, now: Instant, key: MembershipKey) -> bool {
        self.advance(now);
        let latest = self.learned.back().map_or(&self.sealing, |(k, _)| k);
        if *latest == key {
            return false;
        }
        self.learned.push_back((key, now));
        true
    }

    /// The keys an instance started at `now` gets: the one to start it with, and the one
    /// to hand it at once (None when they are the same).
    pub fn for_rejoin(&mut self, now: Instant) -> (MembershipKey, Option<MembershipKey>) {
        self.advance(now);
        (self.sealing.clone(), self.learned.back().map(|(k, _)| k.clone()))
    }

    fn advance(&mut self, now: Instant) {
        while self.learned.front().is_some_and(|(_, at)| *at + self.window <= now) {
            if let Some((key, _)) = self.learned.pop_front() {
                self.sealing = key;
            }
        }
    }
}

/// The key file followed: an unusable key is logged and counted once per distinct error.
#[derive(Debug)]
pub struct KeyFile {
    path: PathBuf,
    /// Rejections, logged and counted once per distinct error.
    reread: Reread,
}

impl KeyFile {
    /// Follows the key file at `path`.
    pub fn new(path: PathBuf) -> Self {
        KeyFile { path, reread: Reread::default() }
    }

    /// Reads the file: its key, or why it cannot be used (naming the field and the file,
    /// never the key).
    pub fn read(&self) -> Result<MembershipKey, String> {
        // The speaker's reader, whose message names the speaker's flag.
        ferrolb_proto::membership::read_key_file(&self.path)
            .map_err(|e| e.replacen("--membership-key-file", "ControlPlaneVIP spec.membershipKeyFile", 1))
    }

    /// Reads the file: its key, or None when it cannot be used (the current key stays).
    pub fn poll(&mut self, metrics: &MembershipMetrics) -> Option<MembershipKey> {
        let read = self.read();
        self.reread.judge(read, metrics)
    }
}

/// The keys of a [`super::SwimMembership`]: the schedule, and the file it follows (if any).
#[derive(Debug)]
pub(super) struct Keys {
    schedule: KeySchedule,
    file: Option<KeyFile>,
}

impl Keys {
    /// The keys of membership started with `cfg`, following `file`.
    pub(super) fn new(cfg: &MembershipConfig, file: Option<PathBuf>) -> Self {
        Keys {
            schedule: KeySchedule::new(cfg.key.clone(), cfg.rotation_window),
            file: file.map(KeyFile::new),
        }
    }

    /// Whether there is a file to re-read.
    pub(super) fn follows_file(&self) -> bool {
        self.file.is_some()
    }

    /// Re-reads the file; a changed valid key goes to the running instance.
    pub(super) fn poll(&mut self, running: &MembershipHandle, metrics: &MembershipMetrics) {
        let Some(file) = self.file.as_mut() else { return };
        if let Some(key) = file.poll(metrics)
            && self.schedule.learn(Instant::now(), key.clone())
        {
            running.set_key(key);
        }
    }

    /// Sets the key a new instance starts with in `cfg`; returns the key to hand it at
    /// once (see the module).
    pub(super) fn for_rejoin(&mut self, cfg: &mut MembershipConfig) -> Option<MembershipKey> {
        let (start, then) = self.schedule.for_rejoin(Instant::now());
        cfg.key = start;
        then
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn key(text: &str) -> MembershipKey {
        MembershipKey::parse(&format!("{text:-<32}")).unwrap()
    }

    /// Which of `names` `k` is (a failing assertion shows the name, not the key).
    fn which(k: &MembershipKey) -> String {
        String::from_utf8_lossy(k.expose()).trim_end_matches('-').to_string()
    }

    fn rejoin(s: &mut KeySchedule, at: Instant) -> (String, Option<String>) {
        let (start, then) = s.for_rejoin(at);
        (which(&start), then.as_ref().map(which))
    }

    #[test]
    fn a_rejoin_starts_with_the_key_the_members_seal_with() {
        let w = Duration::from_secs(30);
        let t = Instant::now();
        let mut s = KeySchedule::new(key("k0"), w);
        assert!(!s.learn(t, key("k0")), "the key in use is no change");
        assert_eq!(rejoin(&mut s, t), ("k0".into(), None));
        assert!(s.learn(t, key("k1")));
        assert!(!s.learn(t + Duration::from_secs(2), key("k1")), "read again: no change");
        // Within W: the old key, and the new one at once.
        assert_eq!(rejoin(&mut s, t + w - Duration::from_millis(1)), ("k0".into(), Some("k1".into())));
        // From W on: the new key alone (the others retire the old one by 2W).
        assert_eq!(rejoin(&mut s, t + w), ("k1".into(), None));
        assert_eq!(rejoin(&mut s, t + w * 3), ("k1".into(), None));
        // Two changes within W: the key sealed with by then, and the newest.
        let t = t + w * 4;
        assert!(s.learn(t, key("k2")));
        assert!(s.learn(t + Duration::from_secs(5), key("k3")));
        assert_eq!(rejoin(&mut s, t + Duration::from_secs(6)), ("k1".into(), Some("k3".into())));
        assert_eq!(rejoin(&mut s, t + w + Duration::from_secs(1)), ("k2".into(), Some("k3".into())));
        assert_eq!(rejoin(&mut s, t + w + Duration::from_secs(5)), ("k3".into(), None));
        // Back to an older key is a change like any other.
        assert!(s.learn(t + w * 2, key("k2")));
        assert_eq!(rejoin(&mut s, t + w * 2), ("k3".into(), Some("k2".into())));
    }

    #[test]
    fn an_unusable_key_file_is_named_by_field_and_path_never_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bootstrap-membership.key");
        std::fs::write(&path, "short-secret\n").unwrap();
        let e = KeyFile::new(path.clone()).read().unwrap_err();
        assert!(e.starts_with("ControlPlaneVIP spec.membershipKeyFile"), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
        assert!(e.contains("fewer than 32"), "{e}");
        assert!(!e.contains("short-secret"), "{e}");
        let e = KeyFile::new(dir.path().join("missing")).read().unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
    }

    // Real membership on localhost, following key files.

    use super::super::SwimMembership;
    use super::super::tests::{config, set};
    use ferrolb_fakeapi::wait::{until_watched_within, until_within};
    use ferrolb_testkit::free_udp_ports;
    use std::collections::BTreeSet;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    const OLD: &str = "0123456789abcdef0123456789abcdef-l2";
    const NEW: &str = "fedcba9876543210fedcba9876543210-l2";

    /// Replaces the key file at once, as `mv` does: never read half written.
    fn write_key(path: &Path, text: &str) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    struct Node {
        membership: SwimMembership,
        metrics: MembershipMetrics,
    }

    /// Starts `name` (health: healthy) with `key`, rotating in `window` (None: the shipped
    /// window), following `file` when given (it holds `key`).
    fn node(
        name: &str,
        port: u16,
        all: &[(&str, u16)],
        key: &str,
        window: Option<Duration>,
        file: Option<&Path>,
    ) -> Node {
        let mut cfg = config(name, port, all);
        cfg.key = MembershipKey::parse(key).unwrap();
        if let Some(w) = window {
            cfg.rotation_window = w;
        }
        let metrics = MembershipMetrics::default();
        let membership = match file {
            Some(f) => {
                write_key(f, key);
                SwimMembership::start_with_key_file(cfg, metrics.clone(), f).unwrap()
            }
            None => SwimMembership::start_with_metrics(cfg, metrics.clone()).unwrap(),
        };
        membership.set_local_health(true);
        Node { membership, metrics }
    }

    async fn all_see(nodes: &[&Node], names: &[&str], what: &str) {
        let all = set(names);
        for n in nodes {
            let mut live = n.membership.live_healthy();
            until_watched_within(what, Duration::from_secs(15), &mut live, |l| *l == all).await;
        }
    }

    async fn until_metric(what: &str, within: Duration, f: impl Fn() -> bool) {
        until_within(what, within, || std::future::ready(f().then_some(()))).await;
    }

    /// Records every view of `n` that lacks one of `names`, from now on.
    struct Losses {
        seen: Arc<Mutex<Vec<BTreeSet<String>>>>,
        task: tokio::task::JoinHandle<()>,
    }

    fn record_losses(n: &Node, names: &[&str]) -> Losses {
        let (all, mut live) = (set(names), n.membership.live_healthy());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while live.changed().await.is_ok() {
                let view = live.borrow_and_update().clone();
                if !all.is_subset(&view) {
                    log.lock().unwrap().push(view);
                }
            }
        });
        Losses { seen, task }
    }

    impl Losses {
        fn assert_none(self, what: &str) {
            self.task.abort();
            let seen = self.seen.lock().unwrap();
            assert!(seen.is_empty(), "{what}: a member was lost from the view: {seen:?}");
        }
    }

    /// Waits until each of `nodes` sealed with the new key and then retired the old one.
    async fn rotated(nodes: &[&Node], w: Duration) {
        let mut sealed = vec![false; nodes.len()];
        until_within(
            "every member sealing with the new key, then retiring the old one",
            KEY_FILE_POLL + w * 3,
            || {
                for (n, s) in nodes.iter().zip(&mut sealed) {
                    *s |= n.metrics.rotation_phase() == 2;
                }
                let done = nodes.iter().zip(&sealed).all(|(n, s)| *s && n.metrics.rotation_phase() == 0);
                std::future::ready(done.then_some(()))
            },
        )
        .await;
    }

    /// The key files change to a new key at different moments: both members rotate
    /// without losing each other, and then seal with and accept the new key alone: a
    /// member that only has the new key joins them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn members_following_their_key_files_rotate_without_a_split() {
        let w = Duration::from_secs(4);
        let [p1, p2, p3] = free_udp_ports();
        let all = [("node1", p1), ("node2", p2), ("node3", p3)];
        let dir = tempfile::tempdir().unwrap();
        let (f1, f2) = (dir.path().join("node1.key"), dir.path().join("node2.key"));
        let n1 = node("node1", p1, &all, OLD, Some(w), Some(&f1));
        let n2 = node("node2", p2, &all, OLD, Some(w), Some(&f2));
        all_see(&[&n1, &n2], &["node1", "node2"], "the members meeting").await;
        let losses = [&n1, &n2].map(|n| record_losses(n, &["node1", "node2"]));
        write_key(&f1, NEW);
        // The other file changes later (each file is read on its own schedule too):
        // the members learn the key up to 2.7 s apart, within W.
        tokio::time::sleep(Duration::from_millis(700)).await;
        write_key(&f2, NEW);
        for n in [&n1, &n2] {
            until_metric("the new key applied", KEY_FILE_POLL * 3, || n.metrics.key_changes("applied") == 1)
                .await;
        }
        rotated(&[&n1, &n2], w).await;
        // Well past 2W: a member still sealing with a retired key would be lost in
        // under a second.
        tokio::time::sleep(w).await;
        let n3 = node("node3", p3, &all, NEW, Some(w), None);
        all_see(&[&n1, &n2, &n3], &["node1", "node2", "node3"], "the member with only the new key joining")
            .await;
        for (l, n) in losses.into_iter().zip(["node1", "node2"]) {
            l.assert_none(&format!("{n}'s view through the rotation"));
        }
        for n in [&n1, &n2] {
            assert_eq!(n.metrics.key_changes("rejected"), 0);
        }
        for n in [n1, n2, n3] {
            n.membership.leave().await;
        }
    }

    /// A member rejoins (health false, then true) within W of a key change, and again
    /// once the rotation finished: each time the others still read it, and nobody is
    /// lost through the rest of the rotation.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_rejoining_during_and_after_a_rotation_still_sees_the_others() {
        let w = Duration::from_secs(5);
        let [p1, p2] = free_udp_ports();
        let all = [("node1", p1), ("node2", p2)];
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("membership.key");
        let n1 = node("node1", p1, &all, OLD, Some(w), Some(&f));
        let n2 = node("node2", p2, &all, OLD, Some(w), Some(&f));
        all_see(&[&n1, &n2], &["node1", "node2"], "the members meeting").await;
        let rejoin = async |what: &str| {
            n1.membership.set_local_health(false);
            all_see(&[&n2], &["node2"], &format!("{what}: node1 unhealthy")).await;
            n1.membership.set_local_health(true);
            all_see(&[&n1, &n2], &["node1", "node2"], &format!("{what}: node1 back")).await;
        };
        write_key(&f, NEW);
        for n in [&n1, &n2] {
            until_metric("the new key applied", KEY_FILE_POLL * 3, || n.metrics.key_changes("applied") >= 1)
                .await;
        }
        // Still accepting both keys, sealing with the old one.
        until_metric("the rotation begun", KEY_FILE_POLL, || n1.metrics.rotation_phase() == 1).await;
        rejoin("a rejoin within W").await;
        let losses = [&n1, &n2].map(|n| record_losses(n, &["node1", "node2"]));
        rotated(&[&n1, &n2], w).await;
        tokio::time::sleep(w).await;
        for (l, n) in losses.into_iter().zip(["node1", "node2"]) {
            l.assert_none(&format!("{n}'s view after a rejoin within W"));
        }
        // The others retired the old key: only an instance started with the new one
        // is read.
        rejoin("a rejoin after the rotation").await;
        n1.membership.leave().await;
        n2.membership.leave().await;
    }

    /// A key file whose key is too short: the current key stays in force (the members
    /// keep each other), the rejection is counted once however often the file is read,
    /// and the file is still followed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unusable_key_file_leaves_the_current_key_in_force() {
        let [p1, p2] = free_udp_ports();
        let all = [("node1", p1), ("node2", p2)];
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("node1.key");
        let n1 = node("node1", p1, &all, OLD, None, Some(&f));
        let n2 = node("node2", p2, &all, OLD, None, None);
        all_see(&[&n1, &n2], &["node1", "node2"], "the members meeting").await;
        let losses = [&n1, &n2].map(|n| record_losses(n, &["node1", "node2"]));
        write_key(&f, "too-short");
        until_metric("the key rejected", KEY_FILE_POLL * 3, || n1.metrics.key_changes("rejected") == 1).await;
        // The same content is read twice more meanwhile (the good key applied below
        // proves the reads go on).
        tokio::time::sleep(KEY_FILE_POLL * 2 + Duration::from_millis(500)).await;
        write_key(&f, NEW);
        until_metric("a good key applied", KEY_FILE_POLL * 3, || n1.metrics.key_changes("applied") == 1)
            .await;
        assert_eq!(n1.metrics.key_changes("rejected"), 1, "counted once");
        until_metric("the rotation begun", KEY_FILE_POLL, || n1.metrics.rotation_phase() == 1).await;
        for (l, n) in losses.into_iter().zip(["node1", "node2"]) {
            l.assert_none(&format!("{n}'s view while the key file was unusable"));
        }
        n1.membership.leave().await;
        n2.membership.leave().await;
    }
}
