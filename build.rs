//! Link-time code layout for the static binary (`cargo static`).
//!
//! `link/trigd.order` lists, in order, the functions trigd runs from
//! start-up to idle (made by `link/order-symbols.sh`). Passed to the linker
//! as `--symbol-ordering-file`, it puts that code together at the start of
//! the text, so the kernel maps a few 64 KiB blocks of the binary at
//! start-up instead of most of them (bench/README.md, "Idle memory").
//!
//! It is used only where it cannot break a build: the static build
//! (`+crt-static`) for x86_64 Linux GNU by a Rust whose default linker
//! there is its bundled LLD (1.90 and later), and only when the file
//! exists. Names the linker does not find (the file made from older code)
//! are skipped without a warning. `TRIGD_LINK_MAP=PATH` also asks for a
//! link map, which `link/order-symbols.sh` reads to map traced addresses
//! back to functions.
//!
//! It also records which commit the binary is built from, for
//! `trigd --version`: `TRIGD_COMMIT` (12 hex digits, or `unknown` when
//! there is no git or no repository, as in a build from a source tarball;
//! a packager may set `TRIGD_BUILD_COMMIT` instead) and `TRIGD_DIRTY`
//! (`dirty` when tracked files differ from that commit, else empty).

use std::env;
use std::path::Path;
use std::process::Command;

const ORDER_FILE: &str = "link/trigd.order";

fn main() {
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-env-changed=TRIGD_LINK_MAP");
    commit_info();
    if !static_build_linked_by_lld() {
        return;
    }
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let order = Path::new(&dir).join(ORDER_FILE);
    if order.is_file() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
    if let Ok(map) = env::var("TRIGD_LINK_MAP") {
        if !map.is_empty() {
            println!("cargo:rustc-link-arg-bins=-Wl,-Map={map}");
        }
    }
}

/// True for the static x86_64 Linux GNU build when rustc links it with its
/// bundled LLD by default and no flag chose another linker.
fn static_build_linked_by_lld() -> bool {
    let var = |name: &str| env::var(name).unwrap_or_default();
    let static_crt = var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|f| f == "crt-static");
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let own_linker = ["linker", "fuse-ld", "link-self-contained"]
        .iter()
        .any(|f| flags.contains(f));
    static_crt
        && var("TARGET") == "x86_64-unknown-linux-gnu"
        && !own_linker
        && rustc(&["--version"])
            .and_then(|v| v.split('.').nth(1)?.parse::<u32>().ok())
            .is_some_and(|minor| minor >= 90)
        && rustc(&["--print", "sysroot"]).is_some_and(|root| {
            Path::new(root.trim())
                .join("lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld/ld.lld")
                .is_file()
        })
}

/// What the rustc cargo builds with prints for ARGS (`rustc 1.MINOR.PATCH
/// ...` for `--version`).
fn rustc(args: &[&str]) -> Option<String> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc).args(args).output().ok()?;
    String::from_utf8(out.stdout).ok()
}

/// Set `TRIGD_COMMIT` and `TRIGD_DIRTY` for `trigd --version`, and ask to
/// be run again when the checked-out commit, the index or a source changes
/// (a rerun-if-changed list replaces cargo's default "any file changed").
fn commit_info() {
    println!("cargo:rerun-if-env-changed=TRIGD_BUILD_COMMIT");
    for path in ["src", "Cargo.toml", "Cargo.lock", "build.rs", "vendor"] {
        println!("cargo:rerun-if-changed={path}");
    }
    let given = env::var("TRIGD_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty());
    let (commit, dirty) = match given {
        Some(commit) => (commit, false),
        None => git_commit().unwrap_or_else(|| ("unknown".into(), false)),
    };
    println!("cargo:rustc-env=TRIGD_COMMIT={commit}");
    println!(
        "cargo:rustc-env=TRIGD_DIRTY={}",
        if dirty { "dirty" } else { "" }
    );
}

/// The short HEAD commit and whether tracked files differ from it, or
/// `None` without git or when the package is not the top of a repository
/// (a source tarball unpacked inside another repository).
fn git_commit() -> Option<(String, bool)> {
    let dir = env::var("CARGO_MANIFEST_DIR").ok()?;
    let top = git(&dir, &["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != Path::new(&dir).canonicalize().ok()? {
        return None;
    }
    let commit = git(&dir, &["rev-parse", "--short=12", "HEAD"])?;
    // Only files that exist: cargo reruns the script (and rebuilds the
    // crate) every time for a path that does not.
    let watch = |path: String| {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    };
    if let Some(git_dir) = git(&dir, &["rev-parse", "--absolute-git-dir"]) {
        watch(format!("{git_dir}/HEAD"));
        watch(format!("{git_dir}/index"));
    }
    let common = git(
        &dir,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    );
    if let Some(common) = common {
        watch(format!("{common}/packed-refs"));
        if let Some(branch) = git(&dir, &["symbolic-ref", "-q", "HEAD"]) {
            watch(format!("{common}/{branch}"));
        }
    }
    let status = git(&dir, &["status", "--porcelain", "--untracked-files=no"])?;
    Some((commit, !status.is_empty()))
}

/// What `git ARGS` prints in DIR, trimmed, when it succeeds.
fn git(dir: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}
