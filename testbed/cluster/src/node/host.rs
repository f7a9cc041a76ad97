//! What a kubelet changes outside its own directories, shared by every kubelet on the
//! machine, and put back when the last one stops.
//!
//! A kubelet sets three host sysctls (`protectKernelDefaults: false`; `true` only makes
//! it refuse to start), writes its device-manager socket and checkpoint to the hardcoded
//! `/var/lib/kubelet/device-plugins/` and links container logs from
//! `/var/log/containers/`. Each running kubelet holds a [`Claim`]: a file named after its
//! lab node namespace (which carries the owning pid) in `<BASE_DIR>/kubelet-host/`. The
//! first claim records the sysctls and which of those directories did not exist; the
//! last release (or [`release_stale`] once every holder's process is gone) restores them.

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use ferrolb_lab::BASE_DIR;
use ferrolb_lab::Error;
use ferrolb_lab::netns;

/// The host sysctls a kubelet sets (to 1, 10 and 1 on these machines).
pub const SYSCTLS: [&str; 3] = ["vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops"];
/// Hardcoded host directories a kubelet (or containerd's shims: their sockets) writes
/// to, parents before children.
pub const HOST_DIRS: [&str; 5] = [
    "/var/lib/kubelet",
    "/var/lib/kubelet/device-plugins",
    "/var/log/containers",
    "/run/containerd",
    "/run/containerd/s",
];

fn dir() -> PathBuf {
    Path::new(BASE_DIR).join("kubelet-host")
}

/// A kubelet's hold on the shared host state; released on drop.
#[derive(Debug)]
pub struct Claim {
    holder: PathBuf,
}

/// Registers `holder` (a lab node namespace name, `flb<pid>x<lab>-nodeN`) as a kubelet
/// about to start; the first holder saves the host state.
pub fn claim(holder: &str) -> Result<Claim, Error> {
    let _lock = lock()?;
    let holders = dir().join("holders");
    std::fs::create_dir_all(&holders)?;
    prune_dead(&holders);
    let saved = dir().join("saved");
    if !saved.exists() || is_empty(&holders) {
        let mut text = String::new();
        for key in SYSCTLS {
            text.push_str(&format!("sysctl {key} {}\n", read_sysctl(key)?));
        }
        for d in HOST_DIRS.iter().filter(|d| !Path::new(d).exists()) {
            text.push_str(&format!("absent {d}\n"));
        }
        std::fs::write(&saved, text)?;
    }
    let holder = holders.join(holder);
    std::fs::write(&holder, "")?;
    Ok(Claim { holder })
}

impl Drop for Claim {
    fn drop(&mut self) {
        let Ok(_lock) = lock() else { return };
        let _ = std::fs::remove_file(&self.holder);
        if let Err(e) = restore_if_unheld() {
            eprintln!("ferrolb-testbed: restoring what the kubelets changed on the host: {e}");
        }
    }
}

/// Restores the host state when every holder's process is gone (`down --stale`).
pub fn release_stale() -> Result<(), Error> {
    if !dir().exists() {
        return Ok(());
    }
    let _lock = lock()?;
    restore_if_unheld()
}

/// The saved value of each sysctl, while some kubelet holds a claim.
pub fn saved_sysctls() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dir().join("saved")).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix("sysctl "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The current value of sysctl `key` (`vm.overcommit_memory`).
pub fn read_sysctl(key: &str) -> Result<String, Error> {
    Ok(std::fs::read_to_string(sysctl_path(key))?.trim().to_owned())
}

fn sysctl_path(key: &str) -> PathBuf {
    Path::new("/proc/sys").join(key.replace('.', "/"))
}

fn restore_if_unheld() -> Result<(), Error> {
    let holders = dir().join("holders");
    prune_dead(&holders);
    if !is_empty(&holders) {
        return Ok(());
    }
    let saved = dir().join("saved");
    let text = std::fs::read_to_string(&saved).unwrap_or_default();
    for line in text.lines() {
        if let Some((key, value)) = line.strip_prefix("sysctl ").and_then(|l| l.split_once(' ')) {
            std::fs::write(sysctl_path(key), value)?;
        }
    }
    // Directories the kubelets made: what they hold is the kubelets' (the device
    // manager's socket and checkpoint, log links into lab directories). Children first.
    let absent: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("absent ")).collect();
    for d in absent.iter().rev() {
        let d = Path::new(d);
        if d == Path::new("/var/log/containers") {
            remove_links_into(d, Path::new(BASE_DIR));
            let _ = std::fs::remove_dir(d);
        } else if d == Path::new("/var/lib/kubelet/device-plugins") {
            let _ = std::fs::remove_dir_all(d);
        } else {
            // Only when empty: another containerd may use it.
            let _ = std::fs::remove_dir(d);
        }
    }
    let _ = std::fs::remove_dir_all(dir());
    Ok(())
}

/// Removes the symbolic links in `dir` that point below `target`.
pub fn remove_links_into(dir: &Path, target: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(target)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Removes holders whose lab's owning process is gone.
fn prune_dead(holders: &Path) {
    for e in std::fs::read_dir(holders).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let alive = netns::parse_owner(&name).is_some_and(|(pid, _)| pid == 0 || netns::pid_alive(pid));
        if !alive {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none())
}

/// Serialises claims and releases of every process on the machine.
fn lock() -> Result<Flock<File>, Error> {
    std::fs::create_dir_all(BASE_DIR)?;
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(Path::new(BASE_DIR).join("kubelet-host.lock"))?;
    Flock::lock(f, FlockArg::LockExclusive).map_err(|(_, e)| Error::Io(std::io::Error::from(e)))
}
