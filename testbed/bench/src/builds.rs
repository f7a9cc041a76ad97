//! What several benches share: which build of ferrolb's programs runs ([`Build`],
//! [`Builds`]), percentiles, and a process's processor time.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferrolb_cluster::ferrolb;
use ferrolb_lab::process::Proc;
use ferrolb_lab::{Error, Lab, addressing, binary, speaker};

/// A build of one of ferrolb's programs, and how it was chosen (for printing).
pub struct Build {
    pub path: PathBuf,
    pub how: String,
}

impl Build {
    /// The newer of the release and debug builds of `name` (`$FERROLB_<NAME>_BIN` wins):
    /// a bench wants the release build, but a test run after `cargo build` must not run a
    /// release build older than the code (`real_scale.rs` did, silently, where an earlier
    /// bench had left one).
    pub fn choose(name: &str) -> Result<Self, Error> {
        if let Some(path) = binary::from_env(name) {
            let how = format!("{name}: {} (from ${})", path.display(), binary::env_var(name));
            return Ok(Build { path, how });
        }
        let release = binary::workspace(name, "release").ok();
        let (path, profile) = match (release, binary::workspace(name, "debug")) {
            (Some(r), Ok(d)) if newer(&d, &r) => (d, "debug build (newer than the release build)"),
            (Some(r), _) => (r, "release build"),
            (None, d) => (d?, "debug build"),
        };
        let how = format!("{name}: {profile}, {}", path.display());
        Ok(Build { path, how })
    }
}

/// Whether file `a` was modified after file `b` (false when either time is unknown).
fn newer(a: &Path, b: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    modified(a).zip(modified(b)).is_some_and(|(a, b)| a > b)
}

/// The controller and speaker builds a bench runs.
pub struct Builds {
    pub controller: Build,
    pub speaker: Build,
}

impl Builds {
    /// Release builds where present ([`Build::choose`]).
    pub fn choose() -> Result<Self, Error> {
        Ok(Builds {
            controller: Build::choose("ferrolb-controller")?,
            speaker: Build::choose("ferrolb-speaker")?,
        })
    }

    /// The controller on lab node `node` (leader election on, as installed).
    pub fn start_controller(&self, lab: &Lab, conf: &Path, node: usize, tag: &str) -> Result<Proc, Error> {
        lab.spawn(lab.node(node), ferrolb::controller_spawn(&self.controller.path, conf, node, tag, &[]))
    }

    /// The speaker of lab node `node` in Kubernetes mode, its metrics on `metrics_port`.
    pub fn start_speaker(
        &self,
        lab: &Lab,
        conf: &Path,
        node: usize,
        tag: &str,
        metrics_port: u16,
    ) -> Result<Proc, Error> {
        let metrics = SocketAddr::new(addressing::node_ip(node), metrics_port);
        lab.spawn(lab.node(node), speaker::kube_spawn(&self.speaker.path, conf, node, tag, Some(metrics)))
    }
}

/// p50, p90, p99 and max (nearest rank).
pub fn percentiles(xs: &[Duration]) -> Option<[Duration; 4]> {
    let mut v = xs.to_vec();
    v.sort();
    let max = *v.last()?;
    let at = |p: usize| v[(v.len() * p).div_ceil(100).clamp(1, v.len()) - 1];
    Some([at(50), at(90), at(99), max])
}

/// Linux reports /proc times in USER_HZ ticks, 100 per second on every architecture it runs.
pub const CLOCK_TICKS: u64 = 100;

/// utime + stime of a process, in clock ticks ([`CLOCK_TICKS`] a second).
pub fn cpu_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    #[test]
    fn the_newer_build_is_the_one_modified_last() {
        let dir = std::env::temp_dir().join(format!("ferrolb-builds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (old, new) = (dir.join("release"), dir.join("debug"));
        let now = SystemTime::now();
        for (path, age) in [(&old, 60), (&new, 0)] {
            let f = std::fs::File::create(path).unwrap();
            f.set_modified(now - Duration::from_secs(age)).unwrap();
        }
        assert!(newer(&new, &old) && !newer(&old, &new));
        assert!(!newer(&dir.join("missing"), &old), "a missing build is never the newer");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
