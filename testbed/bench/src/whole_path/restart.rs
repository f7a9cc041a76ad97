//! Step 3: the speaker SIGKILLed and started again, timed on BIRD's side (session
//! Established, graceful restart over with every route imported again) and in its log.

use std::path::Path;
use std::time::{Duration, Instant};

use super::observe::peer_state;
use super::{BIRD_POLL, Builds, GOAL_SPEAKER, GR_TIME, T, WORKER, line_time, unix_us, us_between};
use crate::bird_ctl::BirdCtl;
use crate::ms;
use ferrolb_lab::process::Proc;
use ferrolb_lab::routers::bird::parse_protocols;
use ferrolb_lab::{Error, Lab, addressing, wait};

/// SIGKILLs the speaker and starts it again; prints how long until BIRD has its session
/// and every route back.
pub(super) fn speaker_restart(
    lab: &Lab,
    builds: &Builds,
    ctl: &mut BirdCtl,
    speaker: &mut Proc,
    conf: &Path,
    total: usize,
) -> Result<(), Error> {
    println!("\n3. Speaker restart (SIGKILL) with {total} Services announced");
    println!(
        "   graceful restart: BIRD `graceful restart on; graceful restart time {}`, BGPPeer gracefulRestart {{enabled: true, restartTime: {}s}}",
        GR_TIME.as_secs(),
        GR_TIME.as_secs()
    );
    let node = addressing::node_ip(WORKER);
    speaker.kill();
    let down = wait::until_value(
        "BIRD to see the killed speaker's session go down",
        T,
        || Ok(peer_state(&ctl.command("show protocols all")?, node)),
        |s| s.as_ref().is_none_or(|s| !s.established),
    )?;
    let (gr, kept) = down.map_or((false, 0), |s| (s.gr_active, s.imported));
    if gr {
        println!("   session down; BIRD keeps {kept}/{total} routes as stale (graceful restart active)");
    } else {
        println!(
            "   session down WITHOUT graceful restart: BIRD kept {kept}/{total} routes; measuring until all are back"
        );
    }

    let (start, start_us) = (Instant::now(), unix_us());
    *speaker = builds.start_speaker(lab, conf, WORKER, "speaker-restarted", super::SPEAKER_METRICS_PORT)?;
    let mut established: Option<Duration> = None;
    let mut polls = 0u64;
    let done = loop {
        let text = ctl.command("show protocols all")?;
        polls += 1;
        let state = peer_state(&text, node);
        let up = parse_protocols(&text).contains(&node);
        if up && established.is_none() {
            established = Some(start.elapsed());
        }
        if let Some(s) = state
            && up
            && !s.gr_active
            && s.imported >= total
        {
            break Some(start.elapsed());
        }
        if start.elapsed() > T {
            break None;
        }
        std::thread::sleep(BIRD_POLL);
    };
    let log = speaker.logs();
    let since = |needles: &[&str]| {
        log.lines()
            .find(|l| needles.iter().all(|n| l.contains(n)))
            .and_then(line_time)
            .map(|t| us_between(start_us, t))
    };
    let synced = since(&["every watch listed: model synced"]);
    let session = since(&["BGP session state changed", "Established"]);
    println!(
        "   BIRD polled over its control socket every {} ms ({polls} polls); speaker times from its log",
        BIRD_POLL.as_millis()
    );
    let row = |what: &str, d: Option<Duration>, note: &str| match d {
        Some(d) => println!("   {what:<58} {:>7.0} ms   {note}", ms(d)),
        None => println!("   {what:<58}       —   {note}"),
    };
    row("restart → speaker's model synced (every watch listed)", synced, "(speaker log)");
    row("restart → session Established", session, "(speaker log)");
    row("restart → session Established", established, "(BIRD)");
    let what = if gr {
        "restart → every route its own again (End-of-RIB, GR over)"
    } else {
        "restart → every route back in BIRD"
    };
    row(what, done, &format!("goal < {} s", GOAL_SPEAKER.as_secs()));
    if done.is_none() {
        println!("   (not within {T:?}: {:?})", peer_state(&ctl.command("show protocols all")?, node));
    }
    Ok(())
}
