//! What every body reader shares: the body's media [`Kind`] (from its
//! `Content-Type`), the fixed bounds on a body's shape, and
//! [`PayloadError`], which says why a body is refused ([`Why`]: invalid, or
//! over a bound). Below `payload`, `json` and `multipart`, so that they
//! share it without depending on one another.

/// Deepest nesting accepted: XML elements, JSON arrays and objects.
pub const MAX_DEPTH: usize = 100;
/// Most elements in one XML document.
pub const MAX_ELEMENTS: usize = 50_000;
/// Most attributes on one XML element.
pub const MAX_ATTRIBUTES: usize = 100;
/// Most fields of a form body (urlencoded pairs, multipart parts).
pub const MAX_FIELDS: usize = 1_000;

/// The kind of body, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `application/json` or `*/*+json`.
    Json,
    /// `application/x-www-form-urlencoded`.
    Form,
    /// `multipart/form-data`.
    Multipart,
    /// `application/xml`, `text/xml` or `*/*+xml`.
    Xml,
    /// Anything else, or no `Content-Type`.
    Other,
}

impl Kind {
    /// The kind named by a `Content-Type` value.
    pub fn of(content_type: Option<&str>) -> Kind {
        let Some(ct) = content_type else {
            return Kind::Other;
        };
        let essence = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "application/json" => Kind::Json,
            "application/x-www-form-urlencoded" => Kind::Form,
            "multipart/form-data" => Kind::Multipart,
            "application/xml" | "text/xml" => Kind::Xml,
            e if e.ends_with("+json") => Kind::Json,
            e if e.ends_with("+xml") => Kind::Xml,
            _ => Kind::Other,
        }
    }

    /// How the kind is named in messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Json => "JSON",
            Kind::Form => "form (application/x-www-form-urlencoded)",
            Kind::Multipart => "multipart/form-data",
            Kind::Xml => "XML",
            Kind::Other => "other",
        }
    }
}

/// Why a body could not be parsed. Messages quote no body content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadError {
    /// The kind the body claimed (or was expected) to be.
    pub kind: Kind,
    /// What is wrong, with a position where the parser gives one.
    pub msg: String,
    /// Whether the body is invalid or over a bound.
    pub why: Why,
}

/// The two ways a body is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Not what its `Content-Type` says (`invalid_payload`).
    Invalid,
    /// Over one of this module's bounds (`payload_too_complex`).
    Bound,
}
