//! `--static FILE`: the model read from a YAML object stream, re-read when it changes.
//!
//! The directory is watched (inotify), not the file: editors and `kubectl`-style tools
//! replace files by rename, and ConfigMap volumes swap a `..data` symlink, both of which
//! a watch on the file itself would miss. Any event in the directory triggers a re-read;
//! unchanged content is ignored by the caller.
//!
//! Latency: an event that says the file is complete (it was renamed into place, its
//! writer closed it, or the `..data` symlink was swapped) triggers the re-read at once.
//! Any other event (a write still in progress, a chmod, a temporary file) waits for
//! [`DEBOUNCE`] so a half-written file is not read while its writer keeps it open.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrolb_api::StreamError;
use tokio::sync::mpsc;

use super::ClusterModel;
use ferrolb_proto::bgp::socket::Password;

/// Why a static file was rejected (the last good content stays in force).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Unreadable, malformed or invalid file.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A BGPPeer's passwordFile could not be read.
    #[error(
        "{file}: BGPPeer/{peer}: spec.passwordFile: cannot read {path}: {reason}; create the file or fix the path"
    )]
    PasswordFile {
        /// The static file.
        file: String,
        /// The BGPPeer.
        peer: String,
        /// The password file.
        path: String,
        /// The I/O error.
        reason: String,
    },
}

/// One successfully read static file.
#[derive(Debug)]
pub struct Loaded {
    /// The model it describes.
    pub model: ClusterModel,
    /// TCP MD5 passwords by BGPPeer name, read from their `passwordFile`s.
    pub passwords: BTreeMap<String, Password>,
    /// Lines about ignored documents, to log.
    pub warnings: Vec<String>,
    /// The digest of the file's text ([`Text::digest`]), to skip parsing it again while
    /// it is unchanged (a hash, not the text: 20 MB with 100k Services). Password files
    /// are polled apart.
    pub fingerprint: u128,
}

/// Reads `path` (and the password files it names) into a model.
pub fn load(path: &Path, lb_class: &str) -> Result<Loaded, LoadError> {
    parse(path, read(path)?, lb_class)
}

/// A static file's text, with its digest.
#[derive(Debug)]
pub struct Text {
    text: String,
    /// XXH3-128 of the text: it only tells an unchanged file, against a file's own last
    /// version, so it needs no cryptographic strength; SHA-256 took 9 ms of the 180 ms
    /// from a file of 50k Services renamed into place to the first UPDATE, XXH3 under 1.
    pub digest: u128,
}

/// Reads `path` and hashes it, without parsing it: an unchanged file (an event in its
/// directory about another file) costs a read and a hash, not a parse of 50k Services.
pub fn read(path: &Path) -> Result<Text, LoadError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| StreamError::Io { file: path.display().to_string(), source })?;
    let digest = xxhash_rust::xxh3::xxh3_128(text.as_bytes());
    Ok(Text { text, digest })
}

/// Parses `text`, read from `path` by [`read`], into a model, with the password files it
/// names.
pub fn parse(path: &Path, text: Text, lb_class: &str) -> Result<Loaded, LoadError> {
    let file = path.display().to_string();
    let Text { text, digest } = text;
    let (model, warnings) = ClusterModel::parse(&file, &text, lb_class)?;
    drop(text);
    let passwords =
        read_password_files(&model, &file)?.into_iter().map(|(name, s)| (name, Password::new(s))).collect();
    Ok(Loaded { model, passwords, warnings, fingerprint: digest })
}

/// Reads the `passwordFile` of every BGPPeer of `model` (read from static file `file`);
/// the speaker also polls them, so a changed password applies without a restart.
pub fn passwords(model: &ClusterModel, file: &Path) -> Result<BTreeMap<String, Password>, LoadError> {
    let file = file.display().to_string();
    Ok(read_password_files(model, &file)?.into_iter().map(|(n, s)| (n, Password::new(s))).collect())
}

fn read_password_files(model: &ClusterModel, file: &str) -> Result<Vec<(String, String)>, LoadError> {
    let mut out = Vec::new();
    for (name, peer) in &model.peers {
        let Some(pw_path) = &peer.spec.password_file else { continue };
        // The validator insists on an absolute path.
        let full = PathBuf::from(pw_path);
        let secret = std::fs::read_to_string(&full).map_err(|e| LoadError::PasswordFile {
            file: file.to_owned(),
            peer: name.clone(),
            path: full.display().to_string(),
            reason: e.to_string(),
        })?;
        out.push((name.clone(), secret.trim().to_owned()));
    }
    Ok(out)
}

/// How long events that do not say the file is complete wait before a re-read.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// The symlink a ConfigMap volume swaps atomically on every update.
const CONFIGMAP_DATA: &str = "..data";

/// Whether an inotify event says `file` (in the watched directory) is complete now:
/// renamed into place or closed by its writer, itself or the ConfigMap `..data` link.
fn completes(mask: nix::sys::inotify::AddWatchFlags, name: Option<&OsStr>, file: &OsStr) -> bool {
    use nix::sys::inotify::AddWatchFlags as F;
    let ours = name.is_some_and(|n| n == file || n == CONFIGMAP_DATA);
    ours && mask.intersects(F::IN_CLOSE_WRITE | F::IN_MOVED_TO)
}

/// Watches the directory holding `path`; yields `()` at once when the file is complete
/// again, or [`DEBOUNCE`] after other events. Notifications coalesce while one is pending.
///
/// Runs a blocking inotify reader on its own thread; it ends when the receiver is dropped.
pub fn watch(path: &Path) -> std::io::Result<mpsc::Receiver<()>> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    use std::os::fd::AsFd;
    let dir: PathBuf = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file = path.file_name().unwrap_or_default().to_os_string();
    let ino = Inotify::init(InitFlags::IN_CLOEXEC).map_err(std::io::Error::from)?;
    ino.add_watch(
        &dir,
        AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_ATTRIB,
    )
    .map_err(std::io::Error::from)?;
    let (tx, rx) = mpsc::channel(1);
    std::thread::Builder::new().name("static-file-watch".into()).spawn(move || {
        // When the first event not completing the file arrived, if one is pending.
        let mut pending: Option<Instant> = None;
        loop {
            let wait = pending.map(|t| DEBOUNCE.saturating_sub(t.elapsed()));
            let timeout = match wait {
                None => PollTimeout::NONE,
                Some(d) => PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX),
            };
            let mut fds = [PollFd::new(ino.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "watching the static file's directory failed");
                    return;
                }
            }
            let readable = fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
            let mut now = false;
            if readable {
                match ino.read_events() {
                    Ok(events) => {
                        for ev in events {
                            if completes(ev.mask, ev.name.as_deref(), &file) {
                                now = true;
                            } else {
                                pending.get_or_insert_with(Instant::now);
                            }
                        }
                    }
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => {
                        tracing::error!(error = %e, "watching the static file's directory failed");
                        return;
                    }
                }
            }
            let due = now || pending.is_some_and(|t| t.elapsed() >= DEBOUNCE);
            if !due {
                continue;
            }
            pending = None;
            // A full channel already holds a pending notification: nothing is lost.
            match tx.try_send(()) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(())) => {}
                Err(mpsc::error::TrySendError::Closed(())) => return,
            }
        }
    })?;
    Ok(rx)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use nix::sys::inotify::AddWatchFlags as F;

    #[test]
    fn only_a_complete_file_is_read_at_once() {
        let file = OsStr::new("static.yaml");
        assert!(completes(F::IN_MOVED_TO, Some(file), file), "renamed into place");
        assert!(completes(F::IN_CLOSE_WRITE, Some(file), file), "its writer closed it");
        assert!(completes(F::IN_MOVED_TO, Some(OsStr::new("..data")), file), "ConfigMap swap");
        assert!(!completes(F::IN_MODIFY, Some(file), file), "a write in progress waits");
        assert!(!completes(F::IN_CREATE, Some(file), file));
        assert!(!completes(F::IN_CLOSE_WRITE, Some(OsStr::new("static.yaml.tmp")), file), "another file");
        assert!(!completes(F::IN_MOVED_TO, None, file));
    }

    async fn next(rx: &mut mpsc::Receiver<()>) -> bool {
        tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.ok().flatten().is_some()
    }

    #[tokio::test]
    async fn a_rename_and_a_slow_write_are_both_seen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("static.yaml");
        std::fs::write(&path, "a").unwrap();
        let mut rx = watch(&path).unwrap();
        let tmp = dir.path().join("static.yaml.tmp");
        std::fs::write(&tmp, "b").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert!(next(&mut rx).await, "a rename into place is notified");
        // A writer that keeps the file open is notified after the debounce, without a close.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, b"c").unwrap();
        assert!(next(&mut rx).await, "a write without close is notified after the debounce");
        drop(f);
        assert!(next(&mut rx).await, "the close is notified");
    }
}
