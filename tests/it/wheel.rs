//! The wheel: `scripts/build-wheel` builds it (one release build), pip installs it into a
//! fresh venv, and the installed command runs with neither Rust nor cargo on its PATH.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{serial, state_home, RefServer};

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `program args` with only the venv's bin, /usr/bin and /bin on PATH.
fn in_venv(venv: &Path, program: &str, args: &[&str]) -> Output {
    let path = format!("{}:/usr/bin:/bin", venv.join("bin").display());
    let out = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", &path)
        .env("HOME", venv)
        .env("XDG_STATE_HOME", state_home())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    println!("$ {program} {}\n{}", args.join(" "), text(&out));
    out
}

#[test]
fn the_wheel_installs_without_rust_and_its_command_sweeps_the_reference_server() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let work = tempfile::tempdir_in(tmp).unwrap();
    let wheels = work.path().join("wheels");

    // Its own target folder: the release build must not wait on the lock of the one that
    // built this test; kept between runs so a second run rebuilds little.
    let out = Command::new(root.join("scripts/build-wheel"))
        .args(["--out", wheels.to_str().unwrap()])
        .env("CARGO_TARGET_DIR", tmp.join("wheel-target"))
        .output()
        .expect("cannot run scripts/build-wheel");
    assert!(out.status.success(), "build-wheel: {}", text(&out));
    let wheel = PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .lines()
            .last()
            .unwrap(),
    );
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("ctxbench-{}-", env!("CARGO_PKG_VERSION")))
            && name.ends_with(".whl")
            && !name.contains("-none-any"),
        "not a platform wheel of this version: {name}"
    );
    println!(
        "wheel {name}: {} bytes",
        std::fs::metadata(&wheel).unwrap().len()
    );

    let venv = work.path().join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(made.status.success(), "venv: {}", text(&made));
    let python = venv.join("bin/python");
    let python = python.to_str().unwrap();
    let pip = in_venv(
        &venv,
        python,
        &[
            "-m",
            "pip",
            "install",
            "--no-index",
            "--disable-pip-version-check",
            wheel.to_str().unwrap(),
        ],
    );
    assert!(pip.status.success(), "pip install failed");

    // What the installed command sees: no Rust toolchain anywhere on its PATH.
    let which = in_venv(
        &venv,
        "sh",
        &["-c", "command -v ctxbench; command -v cargo rustc"],
    );
    let found = String::from_utf8_lossy(&which.stdout).into_owned();
    assert_eq!(
        found.trim(),
        venv.join("bin/ctxbench").to_str().unwrap(),
        "ctxbench from the venv, and no cargo or rustc on PATH"
    );

    let version = in_venv(&venv, "ctxbench", &["--version"]);
    assert!(version.status.success());
    // The wheel holds a build of this very commit. Its "-dirty" may differ from this test's
    // own: a tracked file edited while the suite runs dirties only the later build.
    let clean = |c: &str| c.trim_end_matches("-dirty").to_owned();
    let line = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    let commit = line
        .strip_prefix(&format!("ctxbench {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not 'ctxbench VERSION (COMMIT)': {line}"));
    assert_eq!(clean(commit), clean(ctxbench_session::COMMIT), "{line}");
    let show = in_venv(&venv, python, &["-m", "pip", "show", "ctxbench"]);
    assert!(show.status.success());
    let shown = String::from_utf8_lossy(&show.stdout).into_owned();
    assert!(
        shown
            .lines()
            .any(|l| l == format!("Version: {}", env!("CARGO_PKG_VERSION"))),
        "{shown}"
    );
    // The metadata pip installed names the licences and ships their texts.
    let lib = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let info = lib
        .join("site-packages")
        .join(format!("ctxbench-{}.dist-info", env!("CARGO_PKG_VERSION")));
    let metadata = std::fs::read_to_string(info.join("METADATA")).unwrap();
    assert!(
        metadata.contains("License-Expression: MIT OR Apache-2.0")
            && metadata.contains("# ctxbench"),
        "{metadata}"
    );
    for f in ["LICENSE-MIT", "LICENSE-APACHE"] {
        assert!(info.join("licenses").join(f).is_file(), "{f} not installed");
    }

    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let results = work.path().join("r.jsonl");
    let sweep = in_venv(
        &venv,
        "ctxbench",
        &[
            "sweep",
            "--url",
            &srv.url(),
            "--contexts",
            "1k",
            "--reps",
            "1",
            "--output-tokens",
            "4",
            "--out",
            results.to_str().unwrap(),
        ],
    );
    assert!(
        sweep.status.success(),
        "the installed ctxbench's sweep failed"
    );
    let r = ctxbench_schema::record::read_results(&results, false).unwrap();
    assert_eq!(r.header.ctxbench_commit.as_deref(), Some(commit));
    let ok: Vec<_> = r
        .samples
        .iter()
        .filter(|s| s.status == ctxbench_schema::record::Status::Ok && s.context_tokens == 1024)
        .collect();
    assert_eq!(ok.len(), 1, "one sample at 1k");
}
