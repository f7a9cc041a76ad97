//! BIRD's control socket spoken directly, for benches that poll BIRD every few
//! milliseconds: a `birdc` process per poll (forked into r1's namespace) would cost more
//! than the poll interval and take CPU from the routers being timed.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use ferrolb_lab::Error;

/// A session on a BIRD control socket (what `birdc` speaks), kept open between commands.
#[derive(Debug)]
pub struct BirdCtl {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl BirdCtl {
    /// Connects to the control socket at `path` and reads BIRD's greeting
    /// (`0001 BIRD 2.0.12 ready.`).
    pub fn connect(path: &Path) -> Result<Self, Error> {
        let stream = UnixStream::connect(path)
            .map_err(|e| Error::Missing(format!("BIRD control socket {}: {e}", path.display())))?;
        // Long enough for BIRD busy importing a large table.
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut ctl = BirdCtl { reader: BufReader::new(stream.try_clone()?), writer: stream };
        ctl.reply()?;
        Ok(ctl)
    }

    /// Runs `cmd`; returns its reply as `birdc` prints it (reply codes removed).
    pub fn command(&mut self, cmd: &str) -> Result<String, Error> {
        self.writer.write_all(format!("{cmd}\n").as_bytes())?;
        self.reply()
    }

    /// Reads one reply, as `birdc` does: lines `CODE-text` (more follow) and ` text`
    /// (continuation), then a last `CODE text`; a last code 8xxx or 9xxx is an error.
    fn reply(&mut self) -> Result<String, Error> {
        let mut text = String::new();
        let mut line = String::new();
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(Error::Parse(format!("BIRD closed its control socket; so far: {text}")));
            }
            let (done, body) = parse_line(line.trim_end_matches('\n'));
            if let Some(b'8' | b'9') = done {
                return Err(Error::Parse(format!("BIRD: {body}")));
            }
            text.push_str(body);
            text.push('\n');
            if done.is_some() {
                return Ok(text);
            }
        }
    }
}

/// One line of a reply: its text, and the first digit of its code when it is the last.
fn parse_line(l: &str) -> (Option<u8>, &str) {
    let b = l.as_bytes();
    let coded = b.len() >= 5 && b[..4].iter().all(u8::is_ascii_digit);
    if !coded {
        // A continuation: one space, then the text.
        return (None, l.get(1..).unwrap_or_default());
    }
    let body = l.get(5..).unwrap_or_default();
    ((b[4] == b' ').then_some(b[0]), body)
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;

    use super::{BirdCtl, parse_line};

    #[test]
    fn reply_lines_lose_their_codes_and_the_last_says_so() {
        assert_eq!(parse_line("1002-device1    Device"), (None, "device1    Device"));
        assert_eq!(parse_line("   BGP state:    Established"), (None, "  BGP state:    Established"));
        assert_eq!(parse_line("0000 "), (Some(b'0'), ""));
        assert_eq!(parse_line("0014 Total: 3 of 3 routes"), (Some(b'0'), "Total: 3 of 3 routes"));
        assert_eq!(parse_line("9001 syntax error"), (Some(b'9'), "syntax error"));
        assert_eq!(parse_line(""), (None, ""));
    }

    #[test]
    fn a_session_reads_whole_replies_and_errors() {
        let path = std::env::temp_dir().join(format!("ferrolb-bird-ctl-{}.ctl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let bird = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(b"0001 BIRD 2.0.12 ready.\n").unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut cmd = String::new();
            r.read_line(&mut cmd).unwrap();
            assert_eq!(cmd, "show protocols all\n");
            s.write_all(b"2002-Name       Proto\n1002-peer0_1    BGP\n1006-  BGP state:  Established\n     Neighbor address: 192.0.2.12\n0000 \n").unwrap();
            cmd.clear();
            r.read_line(&mut cmd).unwrap();
            s.write_all(b"9001 syntax error\n").unwrap();
        });
        let mut ctl = BirdCtl::connect(&path).unwrap();
        let text = ctl.command("show protocols all").unwrap();
        assert_eq!(
            text,
            "Name       Proto\npeer0_1    BGP\n  BGP state:  Established\n    Neighbor address: 192.0.2.12\n\n"
        );
        assert!(ctl.command("show nonsense").is_err());
        bird.join().unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
