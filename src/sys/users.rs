//! User and group names, read from `/etc/passwd` and `/etc/group`.
//!
//! Not through glibc's NSS (`getpwnam_r`): the static binary cannot load
//! NSS modules, and for a name the files do not hold, static glibc went on
//! to `dlopen` the next source of `/etc/nsswitch.conf` (Debian lists
//! `systemd`) and crashed (SIGSEGV in `trigd check` and at load). Users
//! and groups of other sources (LDAP, systemd's `DynamicUser=`) are given
//! by number.

use std::fs;
use std::path::Path;

/// The user database.
const PASSWD: &str = "/etc/passwd";
/// The group database.
const GROUP: &str = "/etc/group";

/// One entry of `/etc/passwd` or `/etc/group`: its name, then its id
/// (uid or gid), then for a user its primary gid.
#[derive(Debug, PartialEq, Eq)]
struct Entry<'a> {
    name: &'a str,
    id: u32,
    gid: Option<u32>,
}

/// The entries of a passwd (`user`) or group file's text; lines that are
/// not entries (blank, `#` comments, NIS `+`/`-` lines, too few fields,
/// ids that are not numbers) are skipped, as glibc's files source does.
fn entries(text: &str, user: bool) -> impl Iterator<Item = Entry<'_>> {
    text.lines().filter_map(move |line| {
        if line.starts_with(['#', '+', '-']) {
            return None;
        }
        let mut fields = line.split(':');
        let name = fields.next().filter(|n| !n.is_empty())?;
        let id = fields.nth(1)?.parse().ok()?;
        let gid = if user {
            Some(fields.next()?.parse().ok()?)
        } else {
            None
        };
        Some(Entry { name, id, gid })
    })
}

/// The first entry of `path` that `pick` accepts, turned into a value.
fn find<T>(path: &Path, user: bool, pick: impl Fn(&Entry<'_>) -> Option<T>) -> Option<T> {
    // Not `read_to_string`: a gecos field in Latin-1 would hide every
    // entry of the file.
    let text = String::from_utf8_lossy(&fs::read(path).ok()?).into_owned();
    let found = entries(&text, user).find_map(|e| pick(&e));
    found
}

/// The uid and primary gid of the user called `name` (`/etc/passwd`);
/// `None` when there is no such user.
pub fn user_by_name(name: &str) -> Option<(u32, u32)> {
    find(Path::new(PASSWD), true, |e| {
        (e.name == name).then(|| (e.id, e.gid.unwrap_or_default()))
    })
}

/// The primary gid of the user with `uid` (`/etc/passwd`); `None` when
/// the file has no such user.
pub fn primary_group_of(uid: u32) -> Option<u32> {
    find(Path::new(PASSWD), true, |e| {
        (e.id == uid).then_some(e.gid).flatten()
    })
}

/// The gid of the group called `name` (`/etc/group`); `None` when there
/// is no such group.
pub fn group_by_name(name: &str) -> Option<u32> {
    find(Path::new(GROUP), false, |e| {
        (e.name == name).then_some(e.id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD_TEXT: &str = "root:x:0:0:root:/root:/bin/bash\n\
        # a comment\n\
        \n\
        +nisuser::::::\n\
        -blocked\n\
        broken:x:12\n\
        nonumber:x:abc:1::/:/bin/sh\n\
        :x:5:5::/:/bin/sh\n\
        trigd:x:998:997:trigd:/var/lib/trigd:/usr/sbin/nologin\n\
        trigd:x:1234:1234:second:/:/bin/sh\n";

    #[test]
    fn passwd_entries_skip_what_is_not_an_entry() {
        let got: Vec<Entry<'_>> = entries(PASSWD_TEXT, true).collect();
        let names: Vec<&str> = got.iter().map(|e| e.name).collect();
        assert_eq!(names, ["root", "trigd", "trigd"]);
        assert_eq!(
            got[1],
            Entry {
                name: "trigd",
                id: 998,
                gid: Some(997)
            }
        );
    }

    #[test]
    fn group_entries_have_no_primary_gid() {
        let text = "root:x:0:\nadm:x:4:syslog,alice\nbad:x:\nwww-data:x:33:\n";
        let got: Vec<(&str, u32)> = entries(text, false).map(|e| (e.name, e.id)).collect();
        assert_eq!(got, [("root", 0), ("adm", 4), ("www-data", 33)]);
    }

    #[test]
    fn lookups_in_the_system_files() {
        // Every Linux system has root with uid 0 and gid 0.
        assert_eq!(user_by_name("root"), Some((0, 0)));
        assert_eq!(primary_group_of(0), Some(0));
        assert_eq!(group_by_name("root"), Some(0));
        assert_eq!(user_by_name("no-such-user-trigd"), None);
        assert_eq!(group_by_name("no-such-group-trigd"), None);
        assert_eq!(primary_group_of(u32::MAX - 7), None);
        assert_eq!(user_by_name("root:x"), None);
        assert_eq!(user_by_name(""), None);
    }
}
