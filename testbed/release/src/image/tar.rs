//! The POSIX ustar format, enough for OCI image archives: regular files, directories and
//! symbolic links, written deterministically (mtime 0) and read back with their offsets.

use std::io::{self, Read, Seek, SeekFrom, Write};

const BLOCK: u64 = 512;

/// What a tar entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else (hard links, devices, extended headers).
    Other(u8),
}

/// One entry of an archive as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path inside the archive, without a leading `./` or `/`.
    pub path: String,
    /// What it is.
    pub kind: Kind,
    /// Permission bits (with setuid/setgid/sticky).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Bytes of content.
    pub size: u64,
    /// Target of a symbolic link.
    pub link: String,
    /// Where the content starts, from the start of the stream the archive was read in.
    pub offset: u64,
}

/// Writes entries to `W`; [`Writer::finish`] writes the end-of-archive blocks.
pub struct Writer<W: Write> {
    out: W,
}

impl<W: Write> Writer<W> {
    /// An archive written to `out`.
    pub fn new(out: W) -> Self {
        Writer { out }
    }

    /// A directory (`path` without the trailing slash).
    pub fn dir(&mut self, path: &str, mode: u32, uid: u32, gid: u32) -> io::Result<()> {
        self.header(&format!("{path}/"), b'5', mode, uid, gid, 0, "")
    }

    /// A symbolic link at `path` pointing to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.header(path, b'2', 0o777, 0, 0, 0, target)
    }

    /// A regular file of `size` bytes read from `content`.
    pub fn file(&mut self, path: &str, mode: u32, size: u64, content: &mut impl Read) -> io::Result<()> {
        self.header(path, b'0', mode, 0, 0, size, "")?;
        let copied = io::copy(&mut content.take(size), &mut self.out)?;
        if copied != size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{path}: {copied} bytes of {size}"),
            ));
        }
        self.pad(size)
    }

    /// Two zero blocks, then the writer back.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0; 2 * BLOCK as usize])?;
        self.out.flush()?;
        Ok(self.out)
    }

    #[allow(clippy::too_many_arguments)]
    fn header(
        &mut self,
        path: &str,
        kind: u8,
        mode: u32,
        uid: u32,
        gid: u32,
        size: u64,
        link: &str,
    ) -> io::Result<()> {
        let mut h = [0u8; BLOCK as usize];
        let (prefix, name) = split_path(path)?;
        put(&mut h[0..100], name.as_bytes(), path)?;
        octal(&mut h[100..108], u64::from(mode));
        octal(&mut h[108..116], u64::from(uid));
        octal(&mut h[116..124], u64::from(gid));
        octal(&mut h[124..136], size);
        octal(&mut h[136..148], 0);
        h[156] = kind;
        put(&mut h[157..257], link.as_bytes(), path)?;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        put(&mut h[345..500], prefix.as_bytes(), path)?;
        h[148..156].fill(b' ');
        let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        self.out.write_all(&h)
    }

    fn pad(&mut self, size: u64) -> io::Result<()> {
        let rest = (BLOCK - size % BLOCK) % BLOCK;
        self.out.write_all(&[0; BLOCK as usize][..rest as usize])
    }
}

/// Reads the entries of the archive that occupies `len` bytes of `r` from `start`
/// (the whole stream when `len` is `None`), skipping over their content.
pub fn entries<R: Read + Seek>(r: &mut R, start: u64, len: Option<u64>) -> io::Result<Vec<Entry>> {
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let end = match len {
        Some(len) => start + len,
        None => r.seek(SeekFrom::End(0))?,
    };
    let mut at = start;
    let mut out = Vec::new();
    while at + BLOCK <= end {
        r.seek(SeekFrom::Start(at))?;
        let mut h = [0u8; BLOCK as usize];
        r.read_exact(&mut h)?;
        if h.iter().all(|&b| b == 0) {
            return Ok(out);
        }
        let field = |range: std::ops::Range<usize>| {
            let f = &h[range];
            String::from_utf8_lossy(&f[..f.iter().position(|&b| b == 0).unwrap_or(f.len())]).into_owned()
        };
        let number = |range: std::ops::Range<usize>, what: &str| {
            let text = field(range);
            u64::from_str_radix(text.trim_matches([' ', '\0']), 8)
                .map_err(|_| bad(format!("tar header at {at}: {what} {text:?} is not octal")))
        };
        let stored = number(148..156, "checksum")?;
        let mut blank = h;
        blank[148..156].fill(b' ');
        let sum: u64 = blank.iter().map(|&b| u64::from(b)).sum();
        if sum != stored {
            return Err(bad(format!("tar header at {at}: checksum {stored:o}, computed {sum:o}")));
        }
        let (name, prefix) = (field(0..100), field(345..500));
        let path = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let kind = match h[156] {
            b'0' | 0 => Kind::File,
            b'5' => Kind::Dir,
            b'2' => Kind::Symlink,
            k => Kind::Other(k),
        };
        let size = number(124..136, "size")?;
        let to_u32 = |v: u64, what: &str| u32::try_from(v).map_err(|_| bad(format!("{path}: {what} {v}")));
        out.push(Entry {
            path: path.trim_start_matches("./").trim_start_matches('/').trim_end_matches('/').to_owned(),
            kind,
            mode: to_u32(number(100..108, "mode")?, "mode")?,
            uid: to_u32(number(108..116, "uid")?, "uid")?,
            gid: to_u32(number(116..124, "gid")?, "gid")?,
            size,
            link: field(157..257),
            offset: at + BLOCK,
        });
        at += BLOCK + size.div_ceil(BLOCK) * BLOCK;
    }
    Err(bad(format!("tar archive ends at {at} without its end-of-archive blocks")))
}

/// ustar keeps paths over 100 bytes as a prefix (up to 155) and a name split at a `/`.
fn split_path(path: &str) -> io::Result<(&str, &str)> {
    if path.len() <= 100 {
        return Ok(("", path));
    }
    path.char_indices()
        .filter(|&(i, c)| c == '/' && i <= 155 && path.len() - i - 1 <= 100 && i + 1 < path.len())
        .map(|(i, _)| (&path[..i], &path[i + 1..]))
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{path}: too long for ustar")))
}

fn put(field: &mut [u8], value: &[u8], path: &str) -> io::Result<()> {
    if value.len() > field.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{path}: field too long for ustar")));
    }
    field[..value.len()].copy_from_slice(value);
    Ok(())
}

/// Zero-padded octal filling all but the field's last byte, which stays NUL.
fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    field[..width].copy_from_slice(&text.as_bytes()[text.len() - width..]);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn what_is_written_reads_back() {
        let mut w = Writer::new(Vec::new());
        w.dir("usr/local/bin", 0o755, 0, 0).unwrap();
        w.file("usr/local/bin/x", 0o755, 3, &mut &b"abc"[..]).unwrap();
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(90));
        w.file(&long, 0o644, 0, &mut &b""[..]).unwrap();
        w.symlink("lib64", "lib").unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len() % 512, 0);
        let got = entries(&mut io::Cursor::new(&bytes), 0, None).unwrap();
        let paths: Vec<_> = got.iter().map(|e| (e.path.as_str(), e.kind, e.mode, e.size)).collect();
        assert_eq!(
            paths,
            [
                ("usr/local/bin", Kind::Dir, 0o755, 0),
                ("usr/local/bin/x", Kind::File, 0o755, 3),
                (long.as_str(), Kind::File, 0o644, 0),
                ("lib64", Kind::Symlink, 0o777, 0),
            ]
        );
        let at = got[1].offset as usize;
        assert_eq!(&bytes[at..at + 3], b"abc");
        assert_eq!(got[3].link, "lib");
    }
}
