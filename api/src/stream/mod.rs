//! YAML object streams (API.md "Static object files and checkpoints"): documents
//! separated by `---` or a `kind: List`, exactly as `kubectl get -o yaml` prints them.
//!
//! This file holds what every part shares: where an object sits ([`Source`]), a parsed
//! stream ([`ObjectStream`]) and the error type ([`StreamError`]). The parts:
//! * `object`: the typed [`Object`] and its mapping to and from a [`Config`];
//! * `read`: splitting a file into documents and parsing them (on every core);
//! * `decode`: one document to one [`Object`], with unknown-field checks;
//! * `write`: [`write_stream`] and [`write_atomically`] for checkpoints.

use std::fmt;
use std::io;

use crate::validate::{Config, Origin, ValidConfig, ValidationError};

mod decode;
mod object;
mod read;
mod write;

// The fast reader's tests compare its decoding with the general one.
#[cfg(test)]
pub(crate) use decode::{decode_fast, decode_into};
pub use object::Object;
pub use read::{Taken, json_documents, parse_stream, parse_stream_services, read_stream, split_documents};
pub use write::{write_atomically, write_stream};

/// Where an object sits in a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    /// Document number, counting from 1.
    pub document: usize,
    /// Index in `items` when the document is a `kind: List`.
    pub item: Option<usize>,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "document {}", self.document)?;
        if let Some(i) = self.item {
            write!(f, ", items[{i}]")?;
        }
        Ok(())
    }
}

/// A parsed stream: objects in file order, and warnings about ignored documents.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObjectStream {
    /// Objects with their place in the file.
    pub objects: Vec<(Source, Object)>,
    /// One line per ignored document (unknown kind), to log.
    pub warnings: Vec<String>,
}

/// Why a stream could not be read, validated or written.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// Reading or writing the file failed.
    #[error("{file}: {source}")]
    Io {
        /// File name.
        file: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The YAML itself is malformed.
    #[error("{file}: invalid YAML: {message}")]
    Yaml {
        /// File name.
        file: String,
        /// Parser message, with line and column.
        message: String,
    },
    /// A document is not a valid object of its kind.
    #[error("{file}: {at}: {path}: {message}")]
    Object {
        /// File name.
        file: String,
        /// Document (and List item).
        at: Source,
        /// Field path inside the object, e.g. `spec.addresses[2]`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Objects decoded but the configuration they form is invalid.
    #[error("{file}: invalid configuration:{}", list_errors(errors))]
    Invalid {
        /// File name.
        file: String,
        /// Each error with the place of the object it is about.
        errors: Vec<(Option<Source>, ValidationError)>,
    },
    /// Serializing an object failed.
    #[error("cannot write {kind} {name:?} as YAML: {message}")]
    Serialize {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// Serializer message.
        message: String,
    },
}

fn list_errors(errors: &[(Option<Source>, ValidationError)]) -> String {
    errors
        .iter()
        .map(|(src, e)| match src {
            Some(s) => format!("\n  {s}: {e}"),
            None => format!("\n  {e}"),
        })
        .collect()
}

impl ObjectStream {
    /// The ferrolb configuration objects of the stream, for [`Config::validate`].
    pub fn config(&self) -> Config {
        Config::from_objects(self.objects.iter().map(|(_, o)| o))
    }

    /// Validates [`Self::config`] as file content, naming the document of each object in errors.
    pub fn validated_config(&self, file: &str) -> Result<ValidConfig, StreamError> {
        self.config().validate(Origin::File).map_err(|errors| StreamError::Invalid {
            file: file.to_owned(),
            errors: errors
                .into_iter()
                .map(|e| {
                    let src = self
                        .objects
                        .iter()
                        .find(|(_, o)| o.kind() == e.kind && o.name() == e.name)
                        .map(|(s, _)| *s);
                    (src, e)
                })
                .collect(),
        })
    }
}
