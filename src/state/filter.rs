//! Which runs a list shows (`GET /api/runs`, the Runs page): the filter,
//! the scope, the cursor and the page, shared by the run log's index
//! (`index.rs`) and any other backend (re-exported by `store.rs`).

use crate::state::record::{Origin, RunRecord, RunState};
use crate::state::time::Time;

/// Which runs a list shows (`GET /api/runs`, the Runs page): the
/// caller's [`Scope`], the filters (all that are set must match), the
/// [`Cursor`] to continue after, and the page size. Runs come newest
/// first, ordered by (`CreatedAt`, the id's 32 hex digits), both
/// descending. The exact semantics are in `notes/runfilter.md` and
/// `docs/runs.md`; the PostgreSQL backend implements the same.
#[derive(Debug, Clone)]
pub struct RunFilter {
    /// Whose runs the caller may see at all.
    pub scope: Scope,
    /// Only runs of this program (`Owner::Program(id)`).
    pub program: Option<u64>,
    /// Only runs of a function of this name (for a hook's run: the hook id).
    pub function: Option<String>,
    /// Only runs of this tool's endpoints (the `<tool>` of `Tool`).
    pub tool: Option<String>,
    /// Only runs started by this origin ([`OriginFilter`]).
    pub origin: Option<OriginFilter>,
    /// Only runs in this state.
    pub state: Option<RunState>,
    /// Only runs created at or after this time (inclusive).
    pub since: Option<Time>,
    /// Only runs created before this time (exclusive).
    pub until: Option<Time>,
    /// Only runs strictly older than this position (the page before was
    /// answered up to it).
    pub before: Option<Cursor>,
    /// At most this many runs (the API bounds it to 1..=200).
    pub limit: usize,
}

impl Default for RunFilter {
    /// Every run, newest first, [`DEFAULT_PAGE`] of them.
    fn default() -> RunFilter {
        RunFilter {
            scope: Scope::All,
            program: None,
            function: None,
            tool: None,
            origin: None,
            state: None,
            since: None,
            until: None,
            before: None,
            limit: DEFAULT_PAGE,
        }
    }
}

/// Runs a page holds when the caller does not say.
pub const DEFAULT_PAGE: usize = 50;

/// Most runs a page of the API may hold.
pub const MAX_PAGE: usize = 200;

/// Whose runs a list may show: the rules of `GET /api/runs/<id>`
/// (`runs::authorize`) turned into data before the list is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every run (internal callers: start-up, schedules).
    All,
    /// The runs of these programs (ids of the current config the caller
    /// may access), and of hooks-file hooks when `hooks` (unscoped API
    /// keys only).
    Only {
        /// Program ids.
        programs: std::collections::BTreeSet<u64>,
        /// Hooks-file hooks' runs too.
        hooks: bool,
    },
}

/// Which origins (`By`) a list shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginFilter {
    /// Exactly this origin, e.g. `api_key:deploy` or `public`.
    Exact(Origin),
    /// Every origin of this kind: `api_key`, `app_key`, `session` or
    /// `schedule` (the text before the `:`).
    Kind(String),
}

/// A position in the newest-first order of runs: the run a page ended
/// with. In the API an opaque string, `<CreatedAt in ms since the epoch>`
/// `.` `<32 hex digits>`; any well-formed cursor is just a position (it
/// names no secret), so a forged one shows nothing the caller could not
/// list anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    /// `CreatedAt` of the run, in milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// The 32 hex digits of its id (without the instance name), as bytes.
    pub id: [u8; 16],
}

impl std::fmt::Display for Cursor {
    /// `<created_ms>.<32 hex digits>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.created_ms, hex::encode(self.id))
    }
}

impl std::str::FromStr for Cursor {
    type Err = ();

    /// A cursor as [`Cursor`]'s `Display` writes it: the milliseconds
    /// (an `i64`: a `-` only before a digit other than 0, no leading
    /// zero), a `.`, 32 lower-case hex digits. Anything else (`05`, `-0`)
    /// is not a cursor this server gave.
    fn from_str(s: &str) -> Result<Cursor, ()> {
        let (ms, hex) = s.split_once('.').ok_or(())?;
        let digits = ms.strip_prefix('-').unwrap_or(ms);
        let canonical = digits == "0" && digits == ms || !digits.starts_with('0');
        let plain = !digits.is_empty()
            && digits.len() <= 19
            && digits.bytes().all(|b| b.is_ascii_digit())
            && canonical;
        let lower = hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !plain || !lower {
            return Err(());
        }
        let mut id = [0u8; 16];
        hex::decode_to_slice(hex, &mut id).map_err(|_| ())?;
        Ok(Cursor {
            created_ms: ms.parse().map_err(|_| ())?,
            id,
        })
    }
}

/// A page of runs, newest first, and where the next one starts (`None`
/// when no older run matches).
#[derive(Debug, Clone, Default)]
pub struct RunPage {
    /// The runs, newest first.
    pub runs: Vec<RunRecord>,
    /// The cursor of the last run, when more follow.
    pub next: Option<Cursor>,
}
