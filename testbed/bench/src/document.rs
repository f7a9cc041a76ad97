//! `BENCHMARKS.md` as its writers share it: `bench report` writes the file, `bench scale
//! --write` its "Cluster scale" section and `bench active-active --write` its
//! "Active-active L2" section, each between two markers. Each writer replaces only
//! what is its own, so running one keeps the others' figures.

use std::path::Path;

use ferrolb_lab::Error;

/// The figures' directory, relative to the report.
pub(crate) const FIGURES: &str = "benchmarks";

/// A section of `BENCHMARKS.md` that one bench writes: the lines opening and closing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// The line opening it.
    pub begin: &'static str,
    /// The line closing it.
    pub end: &'static str,
}

/// The cluster-scale section (`bench scale --write`).
pub const SCALE: Section = Section {
    begin: "<!-- bench scale: written by `ferrolb-testbed bench scale --write` -->",
    end: "<!-- /bench scale -->",
};

/// The active-active section (`bench active-active --write`).
pub const ACTIVE_ACTIVE: Section = Section {
    begin: "<!-- bench active-active: written by `ferrolb-testbed bench active-active --write` -->",
    end: "<!-- /bench active-active -->",
};

/// Every section a bench other than `bench report` owns.
pub const SECTIONS: [Section; 2] = [SCALE, ACTIVE_ACTIVE];

/// `doc` with its `which` section replaced by `section` (which carries the markers), or
/// with `section` after it.
pub fn splice(doc: &str, which: Section, section: &str) -> String {
    let section = section.trim_end();
    match (doc.find(which.begin), doc.find(which.end)) {
        (Some(b), Some(e)) if e > b => format!("{}{section}{}", &doc[..b], &doc[e + which.end.len()..]),
        _ => format!("{}\n\n{section}\n", doc.trim_end()).trim_start().to_owned(),
    }
}

/// The `which` section of `doc` with its markers, if it has one.
pub fn section_of(doc: &str, which: Section) -> Option<&str> {
    let b = doc.find(which.begin)?;
    let e = doc[b..].find(which.end)? + b;
    Some(&doc[b..e + which.end.len()])
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
        let (b, e) = (SCALE.begin, SCALE.end);
        let first = format!("{b}\none\n{e}\n");
        let doc = splice("# ferrolb benchmarks\n\nbody\n", SCALE, &first);
        assert_eq!(doc, format!("# ferrolb benchmarks\n\nbody\n\n{first}"));
        let second = format!("{b}\ntwo\n{e}\n");
        let again = splice(&doc, SCALE, &second);
        assert_eq!(again, format!("# ferrolb benchmarks\n\nbody\n\n{second}"));
        assert_eq!(splice("", SCALE, &first), first, "a new file is the section");
        assert_eq!(section_of(&again, SCALE), Some(second.trim_end()));
        assert_eq!(section_of("no section", SCALE), None);
        // Another bench's section is another's: both stay.
        let aa = format!("{}\nthree\n{}\n", ACTIVE_ACTIVE.begin, ACTIVE_ACTIVE.end);
        let both = splice(&again, ACTIVE_ACTIVE, &aa);
        assert_eq!(section_of(&both, SCALE), Some(second.trim_end()));
        assert_eq!(section_of(&both, ACTIVE_ACTIVE), Some(aa.trim_end()));
    }
}
