//! `--static FILE`: the model read from a YAML object stream, re-read when it changes.
//!
//! The directory is watched (inotify), not the file: editors and `kubectl`-style tools
//! replace files by rename, and ConfigMap volumes swap a `..data` symlink, both of which
//! a watch on the file itself would miss. Any event in the directory triggers a re-read;
//! unchanged content is ignored by the caller.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferrolb_api::{StreamError, parse_stream};
use tokio::sync::mpsc;

use super::ClusterModel;
use crate::bgp::socket::Password;

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
    /// What the file and the password files held, to skip re-reads that change nothing.
    pub fingerprint: Vec<u8>,
}

/// Reads `path` (and the password files it names) into a model.
pub fn load(path: &Path, lb_class: &str) -> Result<Loaded, LoadError> {
    let file = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|source| StreamError::Io { file: file.clone(), source })?;
    let stream = parse_stream(&file, &text)?;
    let model = ClusterModel::from_stream(&stream, &file, lb_class)?;
    let mut fingerprint = text.into_bytes();
    let mut passwords = BTreeMap::new();
    for (name, peer) in &model.peers {
        let Some(pw_path) = &peer.spec.password_file else { continue };
        // The validator insists on an absolute path.
        let full = PathBuf::from(pw_path);
        let secret = std::fs::read_to_string(&full).map_err(|e| LoadError::PasswordFile {
            file: file.clone(),
            peer: name.clone(),
            path: full.display().to_string(),
            reason: e.to_string(),
        })?;
        let secret = secret.trim().to_owned();
        fingerprint.push(0);
        fingerprint.extend_from_slice(secret.as_bytes());
        passwords.insert(name.clone(), Password::new(secret));
    }
    Ok(Loaded { model, passwords, warnings: stream.warnings, fingerprint })
}

/// Watches the directory holding `path`; every burst of changes yields one `()`.
///
/// Runs a blocking inotify reader on its own thread; it ends when the receiver is dropped.
pub fn watch(path: &Path) -> std::io::Result<mpsc::Receiver<()>> {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let dir: PathBuf = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
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
        loop {
            match ino.read_events() {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "watching the static file's directory failed");
                    return;
                }
            }
            // A full channel already holds a pending notification: nothing is lost.
            match tx.try_send(()) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(())) => {}
                Err(mpsc::error::TrySendError::Closed(())) => return,
            }
        }
    })?;
    Ok(rx)
}
