//! Records which commit the binary is built from, for `trigd --version`:
//! `TRIGD_COMMIT` (12 hex digits, or `unknown` when there is no git or no
//! repository, as in a build from a source tarball; a packager may set
//! `TRIGD_BUILD_COMMIT` instead) and `TRIGD_DIRTY` (`dirty` when tracked
//! files differ from that commit, else empty). Also writes `openapi.json`
//! minified and deflated to `OUT_DIR`, which `GET /openapi.json` serves.
//! With `+crt-static` (`cargo static`) the binary's relative relocations
//! are packed (DT_RELR).

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    commit_info();
    minify_openapi();
    pack_static_relocations();
}

/// The static-pie binary relocates itself at start: as RELA entries (24
/// bytes each) its ~8,500 relative relocations weigh ~200 KB; DT_RELR
/// (a bitmap per run of words) packs them in a few KB. glibc relocates
/// RELR in static-pie since 2.36, GNU ld writes it since 2.38. Only for
/// `+crt-static`: a dynamic build would ask the host's loader for
/// GLIBC_ABI_DT_RELR.
///
/// Not `--icf=all` (fold identical functions): 52,736 bytes less with LLD
/// 22, but sound only while no C function it folds is compared by
/// address, which nothing would check when glibc or ring changes;
/// `--icf=safe` folds nothing here (no `.llvm_addrsig` from rustc or GCC).
fn pack_static_relocations() {
    let features = env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    if features.split(',').any(|f| f == "crt-static") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// `openapi.json` (kept indented in the tree, for people and diffs) without
/// the white space between tokens: about a fifth smaller on the wire. Only
/// white space outside strings goes; the order of keys stays. Stored
/// deflated (175 KB -> 28 KB of the static binary); the server inflates it
/// once (`http::routes::openapi`).
fn minify_openapi() {
    println!("cargo:rerun-if-changed=openapi.json");
    let text = std::fs::read_to_string("openapi.json").expect("openapi.json");
    let (mut out, mut in_string, mut escaped) = (String::with_capacity(text.len()), false, false);
    for c in text.chars() {
        if in_string {
            (in_string, escaped) = (escaped || c != '"', !escaped && c == '\\');
        } else if c.is_ascii_whitespace() {
            continue;
        } else {
            in_string = c == '"';
        }
        out.push(c);
    }
    let packed = miniz_oxide::deflate::compress_to_vec(out.as_bytes(), 10);
    let dest = Path::new(&env::var("OUT_DIR").expect("OUT_DIR")).join("openapi.min.json.deflate");
    std::fs::write(dest, packed).expect("write openapi.min.json.deflate");
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
