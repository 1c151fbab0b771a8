//! Application keys: one per member per workspace, for the generated tool
//! endpoints (`Authorization: Bearer <key>`).
//!
//! A key is 256 random bits, shown once when generated; the state dir keeps
//! only its sha256, a masked hint and the creation time, in
//! `state/app_keys.json` (written atomically: temp file, fsync, rename, mode
//! 0600). Regenerating replaces the entry, so the old key stops working at
//! once.
//!
//! The file is shared by the server and `trigd app-key` (another process):
//! writers serialise on an advisory lock (`app_keys.lock`), and readers
//! notice a changed file by its metadata before every lookup, so a key made
//! on the command line works in a running server without a restart.

use std::collections::HashMap;
use std::io;
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::secret::{random_hex, sha256};
use crate::state::keys::{KeyFile, Stamp};
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

/// The in-memory view of the file, refreshed when the file changes.
#[derive(Default)]
struct Cache {
    /// (dev, inode, size, mtime ns) of the file last read.
    stamp: Option<Stamp>,
    by_hash: HashMap<[u8; 32], KeyInfo>,
}

/// The application keys of one state dir.
pub struct AppKeys {
    file: KeyFile,
    cache: Mutex<Cache>,
}

impl AppKeys {
    /// The keys kept in `state` (`app_keys.json`).
    pub fn new(state: &State) -> AppKeys {
        AppKeys {
            file: state.key_file(),
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The member and workspace of `key`, if it is a current key.
    pub fn lookup(&self, key: &str) -> Option<KeyInfo> {
        let cache = self.fresh();
        cache.by_hash.get(&sha256(key)).cloned()
    }

    /// The stored info (no key) of `member` in `workspace`.
    pub fn info(&self, workspace: &str, member: &str) -> Option<KeyInfo> {
        let cache = self.fresh();
        cache
            .by_hash
            .values()
            .find(|k| k.workspace == workspace && k.member == member)
            .cloned()
    }

    /// Make a new key for `member` in `workspace`, replacing (and so
    /// invalidating) the old one; returns the key, which is not stored.
    ///
    /// # Errors
    /// The state dir cannot be written.
    pub fn regenerate(&self, workspace: &str, member: &str) -> io::Result<String> {
        let key = format!("tk_{}", random_hex());
        let info = KeyInfo {
            workspace: workspace.to_string(),
            member: member.to_string(),
            sha256: hex::encode(sha256(&key)),
            hint: format!("{}…{}", &key[..7], &key[key.len() - 4..]),
            created_at: Time::now(),
        };
        self.file.update(|all| {
            all.insert(format!("{workspace}/{member}"), info);
        })?;
        // Force the next lookup to re-read.
        self.lock_cache().stamp = None;
        Ok(key)
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
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn regenerate_invalidates_the_old_key() {
        let d = std::env::temp_dir().join(format!("trigd-appkeys-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let keys = AppKeys::new(&State::new(&d, &d));
        let k1 = keys.regenerate("ops", "alice").unwrap();
        assert_eq!(keys.lookup(&k1).unwrap().member, "alice");
        // Another handle (as another process would be) sees the change.
        let other = AppKeys::new(&State::new(&d, &d));
        let k2 = other.regenerate("ops", "alice").unwrap();
        assert!(keys.lookup(&k1).is_none(), "old key must stop working");
        assert_eq!(keys.lookup(&k2).unwrap().workspace, "ops");
        let text = fs::read_to_string(d.join("app_keys.json")).unwrap();
        assert!(!text.contains(&k2), "only the hash is stored");
        let mode = fs::metadata(d.join("app_keys.json")).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
