//! Writing a stream: objects as `---`-separated YAML, and replacing a file atomically.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::StreamError;
use super::object::Object;

/// Writes objects as a `---`-separated stream that [`parse_stream`](super::parse_stream) reads back.
pub fn write_stream<'a>(objects: impl IntoIterator<Item = &'a Object>) -> Result<String, StreamError> {
    let mut out = String::new();
    for o in objects {
        let yaml = serde_saphyr::to_string(o).map_err(|e| StreamError::Serialize {
            kind: o.kind(),
            name: o.name(),
            message: e.to_string(),
        })?;
        out.push_str("---\n");
        out.push_str(&yaml);
        if !yaml.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// Replaces `path` with `bytes` so readers see the old or the new file, never a mix, even
/// across a crash: temp file in the same directory, fsync, rename, fsync the directory.
/// With `keep_previous`, the replaced content stays available as `FILE.prev`.
pub fn write_atomically(path: &Path, bytes: &[u8], keep_previous: bool) -> Result<(), StreamError> {
    let io_err = |source| StreamError::Io { file: path.display().to_string(), source };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| io_err(io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name")))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    // pid + counter: two writers in one process must not share a temp file either.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tmp_name.push(format!(".tmp.{}.{n}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        if keep_previous && path.exists() {
            let mut prev_name = file_name.to_os_string();
            prev_name.push(".prev");
            let prev = dir.join(prev_name);
            match fs::remove_file(&prev) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            // A hard link keeps the old content without a moment where `path` is missing.
            if fs::hard_link(path, &prev).is_err() {
                fs::copy(path, &prev)?;
                fs::File::open(&prev)?.sync_all()?;
            }
        }
        fs::rename(&tmp, path)?;
        fs::File::open(&dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io_err)
}
