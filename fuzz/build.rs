//! Generate the module list of trigd's `src/main.rs` with absolute
//! `#[path]`s, so this library compiles trigd's sources unchanged and stays
//! in step when a module is added there.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let src = root.join("src");
    let main_rs = src.join("main.rs");
    println!("cargo:rerun-if-changed={}", main_rs.display());
    let text = std::fs::read_to_string(&main_rs).expect("read ../src/main.rs");
    let mut out = String::new();
    for line in text.lines() {
        let Some(name) = line
            .trim()
            .strip_prefix("mod ")
            .and_then(|l| l.split(';').next())
        else {
            continue;
        };
        let file = src.join(format!("{name}.rs"));
        let path = if file.exists() {
            file
        } else {
            src.join(name).join("mod.rs")
        };
        let path = path.canonicalize().expect("module file exists");
        writeln!(
            out,
            "#[path = {:?}]\npub(crate) mod {name};",
            path.display().to_string()
        )
        .unwrap();
    }
    println!("cargo:rerun-if-changed={}", src.display());
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("trigd_modules.rs");
    std::fs::write(dest, out).unwrap();
}
