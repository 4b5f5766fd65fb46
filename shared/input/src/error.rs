//! The one error type of this crate.

use std::fmt;

/// A fatal problem in an input, with where it is: the file, the document
/// number within the file (from 1), the object (`Kind namespace/name`) when
/// known, and the field path within the document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", Rendered(self))]
pub struct InputError {
    pub file: String,
    /// 1-based document number within the file, when the error is in one.
    pub document: Option<usize>,
    /// `Kind namespace/name` (or `Kind name` for cluster-scoped objects).
    pub object: Option<String>,
    /// Field path inside the document, e.g.
    /// `spec.template.spec.containers[0].resources.requests.cpu`.
    pub path: Option<String>,
    pub message: String,
}

struct Rendered<'a>(&'a InputError);

impl fmt::Display for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        f.write_str(&e.file)?;
        if let Some(d) = e.document {
            write!(f, " doc {d}")?;
        }
        if let Some(o) = &e.object {
            write!(f, " ({o})")?;
        }
        if let Some(p) = &e.path {
            write!(f, " at {p}")?;
        }
        write!(f, ": {}", e.message)
    }
}

impl InputError {
    /// An error about a whole file.
    pub fn file(file: &str, message: impl fmt::Display) -> Self {
        InputError {
            file: file.to_string(),
            document: None,
            object: None,
            path: None,
            message: message.to_string(),
        }
    }
}
