//! Errors that stop the speaker, and the one line every error is logged as.

use crate::model::static_file::LoadError;

/// Errors that stop the speaker.
#[derive(Debug, thiserror::Error)]
pub enum SpeakerError {
    /// The static file is invalid at start (there is no last good content yet).
    #[error(transparent)]
    Config(#[from] LoadError),
    /// Watching the static file's directory or installing signal handlers failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// L2 announcements cannot start (membership key, addresses, sockets).
    #[error("{0}")]
    L2(String),
}

/// Joins a multi-line error into one line, so every error is one log line.
pub fn one_line(s: &str) -> String {
    let mut out = String::new();
    for l in s.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !out.is_empty() {
            out.push_str(if out.ends_with(':') { " " } else { "; " });
        }
        out.push_str(l);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn errors_become_one_line() {
        let e = "f.yaml: invalid configuration:\n  document 1: a\n  document 2: b";
        assert_eq!(super::one_line(e), "f.yaml: invalid configuration: document 1: a; document 2: b");
    }
}
