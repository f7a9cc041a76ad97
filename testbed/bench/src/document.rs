//! `BENCHMARKS.md` as two writers share it: `bench report` writes the file, `bench scale
//! --write` its "Cluster scale" section, which sits between two markers. Each writer
//! replaces only what is its own, so running one keeps the other's figures.

use std::path::Path;

use ferrolb_lab::Error;

/// The figures' directory, relative to the report.
pub(crate) const FIGURES: &str = "benchmarks";

/// The line opening the cluster-scale section.
pub const SCALE_BEGIN: &str = "<!-- bench scale: written by `ferrolb-testbed bench scale --write` -->";
/// The line closing it.
pub const SCALE_END: &str = "<!-- /bench scale -->";

/// `doc` with its cluster-scale section replaced by `section` (which carries the
/// markers), or with `section` after it.
pub fn splice(doc: &str, section: &str) -> String {
    let section = section.trim_end();
    match (doc.find(SCALE_BEGIN), doc.find(SCALE_END)) {
        (Some(b), Some(e)) if e > b => format!("{}{section}{}", &doc[..b], &doc[e + SCALE_END.len()..]),
        _ => format!("{}\n\n{section}\n", doc.trim_end()).trim_start().to_owned(),
    }
}

/// The cluster-scale section of `doc` with its markers, if it has one.
pub fn section_of(doc: &str) -> Option<&str> {
    let b = doc.find(SCALE_BEGIN)?;
    let e = doc[b..].find(SCALE_END)? + b;
    Some(&doc[b..e + SCALE_END.len()])
}

/// An I/O error naming the file.
pub(crate) fn io_at(path: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

pub(crate) fn write_file(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|e| io_at(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_replaces_its_old_self_and_nothing_else() {
        let first = format!("{SCALE_BEGIN}\none\n{SCALE_END}\n");
        let doc = splice("# ferrolb benchmarks\n\nbody\n", &first);
        assert_eq!(doc, format!("# ferrolb benchmarks\n\nbody\n\n{first}"));
        let second = format!("{SCALE_BEGIN}\ntwo\n{SCALE_END}\n");
        let again = splice(&doc, &second);
        assert_eq!(again, format!("# ferrolb benchmarks\n\nbody\n\n{second}"));
        assert_eq!(splice("", &first), first, "a new file is the section");
        assert_eq!(section_of(&again), Some(second.trim_end()));
        assert_eq!(section_of("no section"), None);
    }
}
