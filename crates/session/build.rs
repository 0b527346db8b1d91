//! Records the git commit ctxbench is built from, so `--version` and every results header
//! say what was built. Outside a git checkout of this workspace (an sdist, a wheel's source,
//! a crates.io download) the commit is "unknown". The workspace's root is two folders up.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let manifest = Path::new(&crate_dir).join("../..");
    // A source tree unpacked inside some other repository must not take that one's commit.
    let ours = git(&["rev-parse", "--show-toplevel"])
        .is_some_and(|top| Path::new(&top).canonicalize().ok() == manifest.canonicalize().ok());
    let commit = ours
        .then(|| git(&["rev-parse", "--short=7", "HEAD"]))
        .flatten()
        .filter(|c| !c.is_empty());
    let value = match commit {
        Some(c) => {
            // Tracked files that differ from HEAD (staged or not) make a build "-dirty".
            let clean = Command::new("git")
                .args(["diff", "--quiet", "HEAD", "--"])
                .status()
                .map(|s| s.success())
                .unwrap_or(true);
            if clean {
                c
            } else {
                format!("{c}-dirty")
            }
        }
        None => "unknown".to_owned(),
    };
    println!("cargo:rustc-env=CTXBENCH_COMMIT={value}");

    // Re-run on a new commit, a checkout, a `git add`, or a source edit (for "-dirty"), but
    // not on every docs edit: that would rebuild the binary for nothing.
    for p in [
        "build.rs",
        "../../Cargo.toml",
        "../../Cargo.lock",
        "../../src",
        "../../crates",
    ] {
        println!("cargo:rerun-if-changed={p}");
    }
    if ours {
        if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
            println!("cargo:rerun-if-changed={dir}/HEAD");
            println!("cargo:rerun-if-changed={dir}/index");
        }
        if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
            let common = Path::new(&crate_dir).join(common);
            println!(
                "cargo:rerun-if-changed={}",
                common.join("packed-refs").display()
            );
            if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
                println!("cargo:rerun-if-changed={}", common.join(head_ref).display());
            }
        }
    }
}
