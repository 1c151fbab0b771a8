//! Application keys: one per member per workspace, for the generated tool
//! endpoints (`Authorization: Bearer <key>`).
//!
//! A key is 256 random bits, shown once when generated; only its sha256, a
//! masked hint and the creation time are kept. Regenerating replaces the
//! entry, so the old key stops working.
//!
//! Two places keep them:
//! - the file `app_keys.json` in `shared_state_dir` (written atomically:
//!   temp file, fsync, rename, mode 0600), shared by the server and
//!   `trigd app-key` (another process): writers serialise on an advisory
//!   lock (`app_keys.lock`), and readers notice a changed file by its
//!   metadata before every lookup, so a key made on the command line works
//!   in a running server without a restart;
//! - with `[state] url`, the table `trigd_app_keys` (`state::pg::keys`):
//!   a key made through any instance or `trigd app-key` works on every
//!   instance at once; each instance keeps a copy kept current by
//!   `LISTEN`/`NOTIFY`, so a bearer request costs no round trip, and an old
//!   key stops working everywhere within milliseconds, at worst within
//!   `state::pg::keys::TRUST` (5 s).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::error::StoreError;
use super::secret::{random_hex, sha256};
use crate::state::keys::{KeyFile, Stamp};
use crate::state::pg::keys::{KeyRow, KeyTable};
use crate::state::time::Time;
use crate::state::State;

/// What is stored for one member's key in one workspace.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct KeyInfo {
    /// Workspace name.
    pub workspace: String,
    /// Member (user) name.
    pub member: String,
    /// sha256 of the key, hex.
    pub sha256: String,
    /// Masked form for display, e.g. `tk_3f9a…c2e1`.
    pub hint: String,
    /// When the key was made.
    pub created_at: Time,
}

impl From<KeyRow> for KeyInfo {
    fn from(k: KeyRow) -> KeyInfo {
        KeyInfo {
            workspace: k.workspace,
            member: k.member,
            sha256: hex::encode(k.sha256),
            hint: k.hint,
            created_at: k.created_at,
        }
    }
}

/// The in-memory view of the file, refreshed when the file changes.
#[derive(Default)]
struct Cache {
    /// (dev, inode, size, mtime ns) of the file last read.
    stamp: Option<Stamp>,
    by_hash: HashMap<[u8; 32], KeyInfo>,
}

/// The key file and its view.
struct Files {
    file: KeyFile,
    cache: Mutex<Cache>,
}

/// Where the keys are.
enum Backend {
    Files(Files),
    Database(KeyTable),
}

/// The application keys of one state.
pub struct AppKeys {
    backend: Backend,
}

impl AppKeys {
    /// The keys kept in `state`: `app_keys.json`, or the database with
    /// `[state] url` (whose copy is not trusted until [`AppKeys::watch`]).
    pub fn new(state: &State) -> AppKeys {
        let backend = match state.db() {
            Some(db) => Backend::Database(KeyTable::new(std::sync::Arc::clone(db))),
            None => Backend::Files(Files {
                file: state.key_file(),
                cache: Mutex::new(Cache::default()),
            }),
        };
        AppKeys { backend }
    }

    /// With the database: keep this instance's copy current from now on
    /// (a thread; the server does this, `trigd app-key` does not).
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn watch(&self) -> std::io::Result<()> {
        match &self.backend {
            Backend::Database(t) => t.watch(),
            Backend::Files(_) => Ok(()),
        }
    }

    /// The member and workspace of `key`, if it is a current key.
    ///
    /// # Errors
    /// The database cannot be used (the file backend does not fail: an
    /// unreadable file is logged and its last view used).
    pub fn lookup(&self, key: &str) -> Result<Option<KeyInfo>, StoreError> {
        match &self.backend {
            Backend::Files(f) => Ok(f.fresh().by_hash.get(&sha256(key)).cloned()),
            Backend::Database(t) => Ok(t.lookup(&sha256(key))?.map(KeyInfo::from)),
        }
    }

    /// The stored info (no key) of `member` in `workspace`.
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn info(&self, workspace: &str, member: &str) -> Result<Option<KeyInfo>, StoreError> {
        match &self.backend {
            Backend::Files(f) => Ok(f
                .fresh()
                .by_hash
                .values()
                .find(|k| k.workspace == workspace && k.member == member)
                .cloned()),
            Backend::Database(t) => Ok(t.get(workspace, member)?.map(KeyInfo::from)),
        }
    }

    /// Make a new key for `member` in `workspace`, replacing (and so
    /// invalidating) the old one; the key, which is not stored, and what
    /// is.
    ///
    /// # Errors
    /// The state dir cannot be written, or the database used.
    pub fn regenerate(
        &self,
        workspace: &str,
        member: &str,
    ) -> Result<(String, KeyInfo), StoreError> {
        let key = format!("tk_{}", random_hex());
        let hash = sha256(&key);
        let hint = format!("{}…{}", &key[..7], &key[key.len() - 4..]);
        let info = match &self.backend {
            Backend::Files(f) => f.put(workspace, member, &hash, hint)?,
            Backend::Database(t) => t.put(workspace, member, &hash, &hint)?.into(),
        };
        Ok((key, info))
    }

    /// Delete the key of `member` in `workspace`; whether there was one.
    /// It stops working at once, as a regenerated key does.
    ///
    /// # Errors
    /// The state dir cannot be written, or the database used.
    pub fn revoke(&self, workspace: &str, member: &str) -> Result<bool, StoreError> {
        let gone = self.revoke_where(|ws, m| ws == workspace && m == member)?;
        Ok(!gone.is_empty())
    }

    /// Delete the keys of members no longer in their workspace, by
    /// `is_member(workspace, member)` of the config just loaded: a member
    /// who leaves loses the key for good, so that adding the name again
    /// (the same person or another) does not bring the old key back. The
    /// (workspace, member) of each key deleted; nothing is written when
    /// there are none.
    ///
    /// # Errors
    /// The state dir cannot be written, or the database used.
    pub fn revoke_leavers(
        &self,
        is_member: impl Fn(&str, &str) -> bool,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.revoke_where(|ws, m| !is_member(ws, m))
    }

    /// Delete the keys whose (workspace, member) `doomed` picks.
    fn revoke_where(
        &self,
        doomed: impl Fn(&str, &str) -> bool,
    ) -> Result<Vec<(String, String)>, StoreError> {
        match &self.backend {
            Backend::Files(f) => Ok(f.remove_where(doomed)?),
            Backend::Database(t) => {
                let mut gone = Vec::new();
                for (ws, member) in t.entries()? {
                    if doomed(&ws, &member) && t.delete(&ws, &member)? {
                        gone.push((ws, member));
                    }
                }
                Ok(gone)
            }
        }
    }
}

impl Files {
    /// Replace the entry of `member` in `workspace`.
    fn put(
        &self,
        workspace: &str,
        member: &str,
        hash: &[u8; 32],
        hint: String,
    ) -> std::io::Result<KeyInfo> {
        let info = KeyInfo {
            workspace: workspace.to_string(),
            member: member.to_string(),
            sha256: hex::encode(hash),
            hint,
            created_at: Time::now(),
        };
        let entry = info.clone();
        self.file.update(|all| {
            all.insert(format!("{workspace}/{member}"), entry);
        })?;
        // Force the next lookup to re-read.
        self.lock_cache().stamp = None;
        Ok(info)
    }

    /// Delete the entries whose (workspace, member) `doomed` picks, under
    /// the writers' lock; the file is left alone when it holds none.
    fn remove_where(
        &self,
        doomed: impl Fn(&str, &str) -> bool,
    ) -> std::io::Result<Vec<(String, String)>> {
        let picked = |k: &KeyInfo| doomed(&k.workspace, &k.member);
        if !self.file.read::<KeyInfo>()?.values().any(picked) {
            return Ok(Vec::new());
        }
        let mut gone = Vec::new();
        self.file.update(|all: &mut BTreeMap<String, KeyInfo>| {
            all.retain(|_, k| {
                let keep = !picked(k);
                if !keep {
                    gone.push((k.workspace.clone(), k.member.clone()));
                }
                keep
            });
        })?;
        // Force the next lookup to re-read.
        self.lock_cache().stamp = None;
        Ok(gone)
    }

    fn lock_cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cache, re-read first if the file changed since.
    fn fresh(&self) -> MutexGuard<'_, Cache> {
        let mut cache = self.lock_cache();
        let stamp = self.file.stamp();
        if stamp != cache.stamp {
            match self.file.read::<KeyInfo>() {
                Ok(all) => {
                    cache.by_hash = all
                        .into_values()
                        .filter_map(|k| {
                            let mut h = [0u8; 32];
                            hex::decode_to_slice(&k.sha256, &mut h).ok()?;
                            Some((h, k))
                        })
                        .collect();
                    cache.stamp = stamp;
                }
                Err(e) => log::error!("cannot read {}: {e}", self.file.path().display()),
            }
        }
        cache
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_dir::TestDir;
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn regenerate_invalidates_the_old_key() {
        let dir = TestDir::new("appkeys");
        let d = dir.path();
        let keys = AppKeys::new(&State::new(d, d));
        let (k1, _) = keys.regenerate("ops", "alice").unwrap();
        assert_eq!(keys.lookup(&k1).unwrap().unwrap().member, "alice");
        // Another handle (as another process would be) sees the change.
        let other = AppKeys::new(&State::new(d, d));
        let (k2, _) = other.regenerate("ops", "alice").unwrap();
        assert!(
            keys.lookup(&k1).unwrap().is_none(),
            "old key must stop working"
        );
        assert_eq!(keys.lookup(&k2).unwrap().unwrap().workspace, "ops");
        let text = fs::read_to_string(d.join("app_keys.json")).unwrap();
        assert!(!text.contains(&k2), "only the hash is stored");
        let mode = fs::metadata(d.join("app_keys.json")).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
