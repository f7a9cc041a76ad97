//! API errors, rendered as the `Status` objects the real apiserver returns.

use serde_json::{Value, json};

/// An error the fake apiserver answers a request with; becomes a `Status` body.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// 404: the object, namespace or resource type does not exist.
    #[error("{kind} \"{name}\" not found")]
    NotFound {
        /// Resource plural, as the real server reports it (e.g. `services`).
        kind: String,
        /// Object name.
        name: String,
    },
    /// 409 on create: an object with that name already exists.
    #[error("{kind} \"{name}\" already exists")]
    AlreadyExists {
        /// Resource plural.
        kind: String,
        /// Object name.
        name: String,
    },
    /// 409 on update: the caller's resourceVersion is stale.
    #[error(
        "Operation cannot be fulfilled on {kind} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
    )]
    Conflict {
        /// Resource plural.
        kind: String,
        /// Object name.
        name: String,
    },
    /// 409 on server-side apply: other managers own fields with different values.
    #[error("Apply failed with {} conflict(s): {}", .conflicts.len(), render_conflicts(.conflicts))]
    ApplyConflict {
        /// `(manager, field path)` pairs in conflict.
        conflicts: Vec<(String, String)>,
    },
    /// 400: the request body or parameters are malformed.
    #[error("{0}")]
    BadRequest(String),
    /// 422: a JSON patch could not be applied (e.g. a failed `test` operation).
    #[error("{0}")]
    Unprocessable(String),
    /// 405: the verb is not supported on this path.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 415: an unsupported patch or body content type.
    #[error("the body of the request was in an unknown format - accepted media types include: {0}")]
    UnsupportedMediaType(String),
    /// 503: the simulated apiserver outage is on.
    #[error("the server is currently unable to handle the request")]
    Unavailable,
}

fn render_conflicts(conflicts: &[(String, String)]) -> String {
    conflicts.iter().map(|(m, f)| format!("conflict with \"{m}\": {f}")).collect::<Vec<_>>().join(", ")
}

impl ApiError {
    /// HTTP status code of this error.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } => 404,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => {
                409
            }
            ApiError::BadRequest(_) => 400,
            ApiError::Unprocessable(_) => 422,
            ApiError::MethodNotAllowed => 405,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::Unavailable => 503,
        }
    }

    /// The machine-readable `reason` field of the Status.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => "Conflict",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Unprocessable(_) => "Invalid",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::Unavailable => "ServiceUnavailable",
        }
    }

    /// The `Status` object the real apiserver would send for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        let details = match self {
            ApiError::NotFound { kind, name }
            | ApiError::AlreadyExists { kind, name }
            | ApiError::Conflict { kind, name } => Some(json!({ "name": name, "kind": kind })),
            ApiError::ApplyConflict { conflicts } => Some(json!({
                "causes": conflicts.iter().map(|(m, f)| json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with \"{m}\""),
                    "field": f,
                })).collect::<Vec<_>>()
            })),
            _ => None,
        };
        if let (Some(details), Some(obj)) = (details, status.as_object_mut()) {
            obj.insert("details".into(), details);
        }
        status
    }
}

/// The 410 Gone Status sent as an `ERROR` watch event when the requested resourceVersion was compacted.
pub(crate) fn gone_status(rv: u64) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("too old resource version: {rv}"),
        "reason": "Expired",
        "code": 410,
    })
}
