//! The one error of what access keeps (application keys, sessions): a file
//! of the state dir or the database failed.

use std::fmt;

use crate::http::ApiError;
use crate::state::pg::DbError;

/// Why application keys or sessions could not be read or kept.
#[derive(Debug)]
pub enum StoreError {
    /// The state dir (a file in it) failed.
    Io(std::io::Error),
    /// The database failed ([`DbError`]).
    Db(DbError),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io(e) => e.fmt(f),
            StoreError::Db(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> StoreError {
        StoreError::Io(e)
    }
}

impl From<DbError> for StoreError {
    fn from(e: DbError) -> StoreError {
        StoreError::Db(e)
    }
}

impl From<StoreError> for ApiError {
    /// 503 `state_unavailable` while the database is unreachable, else
    /// 500 `internal_error`; logged.
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::Db(e) => ApiError::db(&e),
            StoreError::Io(e) => {
                log::error!("cannot keep access state: {e}");
                ApiError::Internal
            }
        }
    }
}
