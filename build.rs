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

use std::env;
use std::path::Path;
use std::process::Command;

const ORDER_FILE: &str = "link/trigd.order";

fn main() {
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-env-changed=TRIGD_LINK_MAP");
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
