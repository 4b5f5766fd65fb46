//! Project automation: `cargo xtask <command>`.
//!
//! * `test`    – the one test command: rustfmt check, clippy (`-D warnings`),
//!   the workspace tests (cargo-nextest when installed, else `cargo test`;
//!   moto's server installed into the venv first, for the AWS suites) and
//!   `cfn-lint` over `infra/template.yaml` when that template exists.
//!   Superseded test executables are pruned from the build cache first
//!   ([`prune`]), so a cache kept across many runs does not fill the disk.
//! * `demo`    – `flotilla demo` from a release build.
//! * `catalog` – regenerates the embedded instance-type catalog
//!   (`shared/core/data/generate_catalog.py`).
//! * `sam-build` – `sam build -t infra/template.yaml --beta-features`, the
//!   README's command, through SAM's own `rust-cargolambda` builder (SAM CLI,
//!   cargo-lambda and zig from PyPI, into the venv); checks the five arm64
//!   bootstraps and prints their sizes.
//! * `lambda-build` – `cargo lambda build --release --arm64` of the five
//!   functions (cargo-lambda and zig from PyPI, into the venv), with sizes.
//! * `coldstart` – cold start of each function binary against a local
//!   Runtime API emulator ([`coldstart`]).
//!
//! Only `std::process::Command`; every child inherits the environment, with
//! `CARGO_TARGET_DIR` defaulting to `$HOME/.cache/flotilla/target`.

use std::env;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

mod coldstart;
mod prune;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test      rustfmt --check, clippy -D warnings, workspace tests, cfn-lint (if infra/template.yaml exists)
  demo      run `flotilla demo` from a release build
  catalog   regenerate the embedded instance-type catalog (shared/core/data/generate_catalog.py)
  bench     speed/memory per workload mix, then plan price against the HiGHS lower bound
            (installs highspy into ~/.cache/flotilla/venv); args go to the speed runner
  sam-build `sam build -t infra/template.yaml --beta-features` as the README documents it
            (installs aws-sam-cli, cargo-lambda and zig from PyPI into the venv); checks
            and prints the five arm64 bootstraps in .aws-sam/build/
  lambda-build
            `cargo lambda build --release --arm64` of the five functions (installs
            cargo-lambda and zig from PyPI into the venv); prints the bootstrap sizes
  coldstart [--runs N] [--arm64]
            cold start (init, first invoke) of each function's release binary against
            a local Lambda Runtime API emulator and moto; JSON on stdout. --arm64: the
            sam-build bootstraps under qemu-user (apt-get install qemu-user libc6-arm64-cross)
";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("demo") => demo(&args[1..]),
        Some("catalog") => catalog(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("lambda-build") => lambda_build(&args[1..]),
        Some("sam-build") => sam_build(&args[1..]),
        Some("coldstart") => {
            let venv = venv_with("coldstart", "moto[server]==5.2.5", "moto.server");
            venv.and_then(|bin| {
                coldstart::coldstart(&args[1..], &root(), &target_dir(), cargo(), &bin)
            })
        }
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => {
            eprint!("xtask: unknown command {other:?}\n\n{USAGE}");
            return ExitCode::from(2);
        }
        None => {
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (the parent of this crate's directory).
/// The workspace root. `cargo run` sets `CARGO_MANIFEST_DIR` for the run:
/// read it at run time first, since a build cache shared between clones
/// (CI and a developer's checkout) may hold an xtask compiled in another
/// clone, whose compile-time path no longer exists.
fn root() -> PathBuf {
    let manifest = env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|p| p.join("Cargo.toml").is_file())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.parent().unwrap_or(&manifest).to_path_buf()
}

fn home() -> PathBuf {
    env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

fn cache_dir() -> PathBuf {
    home().join(".cache").join("flotilla")
}

/// `CARGO_TARGET_DIR` for child cargo commands: the caller's, else the
/// shared cache directory.
fn target_dir() -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => cache_dir().join("target"),
    }
}

fn cargo() -> Command {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(cargo);
    c.current_dir(root());
    c.env("CARGO_TARGET_DIR", target_dir());
    c
}

fn describe(c: &Command) -> String {
    let mut s = c.get_program().to_string_lossy().into_owned();
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

pub(crate) fn banner(step: &str) {
    println!("\n==> {step}");
    let _ = std::io::stdout().flush();
}

/// Runs `c` with inherited stdio; an error names `step`.
pub(crate) fn run(step: &str, mut c: Command) -> Result<()> {
    banner(step);
    println!("    $ {}", describe(&c));
    let start = Instant::now();
    let status = c
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("step `{step}`: could not start `{}`", describe(&c)))?;
    if !status.success() {
        bail!(
            "step `{step}` failed ({status}) after {:.1}s: `{}`",
            start.elapsed().as_secs_f64(),
            describe(&c)
        );
    }
    println!("    ok: {step} ({:.1}s)", start.elapsed().as_secs_f64());
    Ok(())
}

/// Whether `program args...` starts and exits successfully (quietly).
fn probe<I, S>(program: impl AsRef<OsStr>, args: I) -> bool
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn test(args: &[String]) -> Result<()> {
    if let Some(a) = args.first() {
        bail!("`cargo xtask test` takes no arguments (got {a:?})");
    }
    let start = Instant::now();
    println!("CARGO_TARGET_DIR={}", target_dir().display());
    prune::prune_stale_executables(&target_dir());
    // A fresh clone builds once: incremental state would only fill the
    // shared cache (a new set per clone path, 15 GB seen here).
    if env::var_os("CARGO_INCREMENTAL").is_none() {
        env::set_var("CARGO_INCREMENTAL", "0");
    }

    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    run("rustfmt", fmt)?;

    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    run("clippy", clippy)?;

    tests()?;
    cfn_lint()?;

    println!(
        "\nxtask test: all steps passed in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `cargo nextest run --workspace` when nextest is installed (plus the
/// doctests, which nextest does not run), else `cargo test --workspace`.
/// Prints the runner's summary line(s) again at the end.
fn tests() -> Result<()> {
    // The AWS adapter and pipeline suites (tests/) run against moto's
    // server on loopback: DynamoDB, EventBridge and EC2 API shapes.
    let bin = venv_with("tests", "moto[server]==5.2.5", "moto.server")?;
    let moto = bin.join("moto_server");
    if !moto.exists() {
        bail!(
            "step `tests`: {} missing after installing moto[server]",
            moto.display()
        );
    }
    env::set_var("FLOTILLA_MOTO_SERVER", &moto);
    let nextest = probe(
        env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
        ["nextest", "--version"],
    );
    if nextest {
        let mut c = cargo();
        c.args(["nextest", "run", "--workspace", "--no-fail-fast"]);
        let summary = run_capturing_summary("tests (cargo nextest)", c, |l| {
            let t = l.trim_start();
            t.starts_with("Summary [")
        })?;
        let mut doc = cargo();
        doc.args(["test", "--workspace", "--doc", "--quiet"]);
        let doc_summary = run_capturing_summary("doctests (cargo test --doc)", doc, |l| {
            l.starts_with("test result:")
        })?;
        print_summary("tests (cargo nextest)", &summary);
        print_summary("doctests", &aggregate_libtest(&doc_summary));
    } else {
        println!("(cargo-nextest not installed; using cargo test)");
        let mut c = cargo();
        c.args(["test", "--workspace", "--no-fail-fast"]);
        let summary =
            run_capturing_summary("tests (cargo test)", c, |l| l.starts_with("test result:"))?;
        print_summary("tests (cargo test)", &aggregate_libtest(&summary));
    }
    Ok(())
}

fn print_summary(step: &str, lines: &[String]) {
    for l in lines {
        println!("    {step}: {}", l.trim());
    }
}

/// Sums libtest's per-binary `test result:` lines into one line.
fn aggregate_libtest(lines: &[String]) -> Vec<String> {
    let (mut passed, mut failed, mut ignored, mut binaries) = (0u64, 0u64, 0u64, 0u64);
    for l in lines {
        binaries += 1;
        let num_before = |word: &str| -> u64 {
            l.split(';')
                .find_map(|part| {
                    let part = part.trim();
                    let part = part.rsplit(". ").next().unwrap_or(part);
                    let (n, w) = part.split_once(' ')?;
                    (w.trim() == word).then(|| n.trim().parse().ok()).flatten()
                })
                .unwrap_or(0)
        };
        passed += num_before("passed");
        failed += num_before("failed");
        ignored += num_before("ignored");
    }
    if binaries == 0 {
        return Vec::new();
    }
    vec![format!(
        "{passed} passed, {failed} failed, {ignored} ignored ({binaries} test binaries)"
    )]
}

/// Runs `c`, streaming its stdout and stderr through while keeping the
/// lines `is_summary` selects (from either stream).
fn run_capturing_summary(
    step: &str,
    mut c: Command,
    is_summary: impl Fn(&str) -> bool + Sync,
) -> Result<Vec<String>> {
    banner(step);
    println!("    $ {}", describe(&c));
    let start = Instant::now();
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("step `{step}`: could not start `{}`", describe(&c)))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let is_summary = &is_summary;
    let (mut out_lines, err_lines) = std::thread::scope(|s| {
        let err = s.spawn(move || {
            let mut keep = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("{line}");
                if is_summary(strip_ansi(&line).as_str()) {
                    keep.push(strip_ansi(&line));
                }
            }
            keep
        });
        let mut keep = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("{line}");
            if is_summary(strip_ansi(&line).as_str()) {
                keep.push(strip_ansi(&line));
            }
        }
        (keep, err.join().unwrap_or_default())
    });
    let status = child
        .wait()
        .with_context(|| format!("step `{step}`: waiting for `{}`", describe(&c)))?;
    out_lines.extend(err_lines);
    if !status.success() {
        for l in &out_lines {
            eprintln!("    {step}: {}", l.trim());
        }
        bail!(
            "step `{step}` failed ({status}) after {:.1}s: `{}`",
            start.elapsed().as_secs_f64(),
            describe(&c)
        );
    }
    println!("    ok: {step} ({:.1}s)", start.elapsed().as_secs_f64());
    Ok(out_lines)
}

/// Removes ANSI escape sequences (colour codes) from a line.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// `cfn-lint infra/template.yaml` from a venv in the cache directory, when
/// the template exists.
fn cfn_lint() -> Result<()> {
    let template = root().join("infra").join("template.yaml");
    if !template.exists() {
        banner("cfn-lint");
        println!("    skipped: no infra/template.yaml yet");
        return Ok(());
    }
    let cfn_lint = venv_with("cfn-lint", "cfn-lint", "cfnlint")?.join("cfn-lint");
    let mut c = Command::new(&cfn_lint);
    c.current_dir(root()).arg("infra/template.yaml");
    run("cfn-lint", c)
}

/// The project's Python venv (`~/.cache/flotilla/venv`) with `package`
/// installed (probed by importing `module`); returns its `bin` directory.
fn venv_with(step: &str, package: &str, module: &str) -> Result<PathBuf> {
    let venv = cache_dir().join("venv");
    let bin = venv.join("bin");
    if !bin.join("python").exists() {
        let python = ["python3", "python"]
            .into_iter()
            .find(|p| probe(p, ["--version"]))
            .with_context(|| format!("step `{step}`: no python3 on PATH to create the venv"))?;
        let mut c = Command::new(python);
        c.arg("-m").arg("venv").arg(&venv);
        run(&format!("{step}: create venv"), c)?;
    }
    if !probe(bin.join("python"), ["-c", &format!("import {module}")]) {
        let mut pip = Command::new(bin.join("python"));
        pip.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            package,
        ]);
        run(&format!("{step}: pip install {package}"), pip)?;
    }
    Ok(bin)
}

/// `cargo run --quiet --release -p PACKAGE --bin BIN --`; the binary's own
/// arguments follow.
fn release_bin(package: &str, bin: &str) -> Command {
    let mut c = cargo();
    c.args([
        "run",
        "--quiet",
        "--release",
        "-p",
        package,
        "--bin",
        bin,
        "--",
    ]);
    c
}

/// Speed and memory of every workload mix (one process per run), then plan
/// quality against the HiGHS lower bound and exact optima, then disruption
/// decision time and quality on fragmented clusters; JSON on stdout.
fn bench(args: &[String]) -> Result<()> {
    let mut speed = release_bin("flotilla-bench", "speed");
    if args.is_empty() {
        speed.args(["--pods", "100,1000,10000,50000", "--baseline-max", "10000"]);
    } else {
        speed.args(args);
    }
    run("bench: speed", speed)?;
    let python = venv_with("bench", "highspy", "highspy")?.join("python");
    for extra in [&[][..], &["--small"][..]] {
        let mut q = release_bin("flotilla-bench", "quality");
        q.arg("--python").arg(&python).args(extra);
        run("bench: quality", q)?;
    }
    // Disruption: decision time and peak memory of one run on fragmented
    // clusters (3 runs each, one process per run), then quality to the
    // fixed point against the Karpenter-style baseline and the LP bound.
    let mut c = release_bin("flotilla-bench", "consolidation");
    c.args(["--nodes", "1000,5000", "--runs", "3"]);
    run("bench: disruption decision time", c)?;
    let mut q = release_bin("flotilla-bench", "consolidation_quality");
    q.arg("--python")
        .arg(&python)
        .args(["--nodes", "100,300", "--seeds", "3"]);
    run("bench: disruption quality", q)?;
    Ok(())
}

/// The five function packages and their binaries.
const FUNCTION_PACKAGES: [(&str, &str); 5] = [
    ("flotilla-fn-intake", "intake"),
    ("flotilla-fn-schedule", "schedule"),
    ("flotilla-fn-launch", "launch"),
    ("flotilla-fn-sweep", "sweep"),
    ("flotilla-fn-disrupt", "disrupt"),
];

/// The venv's `bin` with cargo-lambda and zig (and, with `sam`, the SAM
/// CLI) installed from PyPI, and a `PATH` that puts it first: cargo-lambda
/// finds zig (`python -m ziglang`) and SAM finds cargo-lambda there.
fn lambda_tools(step: &str, sam: bool) -> Result<(PathBuf, std::ffi::OsString)> {
    let venv = cache_dir().join("venv").join("bin");
    let mut wanted: Vec<&str> = Vec::new();
    if !venv.join("cargo-lambda").exists() || !probe(venv.join("python"), ["-c", "import ziglang"])
    {
        wanted.extend(["cargo-lambda", "ziglang"]);
    }
    if sam && !probe(venv.join("sam"), ["--version"]) {
        wanted.push("aws-sam-cli");
    }
    if !wanted.is_empty() {
        venv_with(step, "pip", "pip")?;
        let mut pip = Command::new(venv.join("python"));
        pip.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(&wanted);
        run(&format!("{step}: pip install {}", wanted.join(" ")), pip)?;
    }
    let path = env::join_paths(
        std::iter::once(venv.clone())
            .chain(env::split_paths(&env::var_os("PATH").unwrap_or_default())),
    )
    .context("PATH")?;
    Ok((venv, path))
}

/// `cargo lambda build --release --arm64` of the five functions in one
/// cargo invocation (`-p` each). Faster than `sam build`, which builds them
/// one by one; `sam-build` is the proof that SAM's own builder works.
fn lambda_build(args: &[String]) -> Result<()> {
    let (_, path) = lambda_tools("lambda-build", false)?;
    let mut c = cargo();
    c.env("PATH", path)
        .args(["lambda", "build", "--release", "--arm64"]);
    for (package, _) in FUNCTION_PACKAGES {
        c.args(["-p", package]);
    }
    c.args(args);
    run("lambda-build", c)?;
    for (_, bin) in FUNCTION_PACKAGES {
        let bootstrap = target_dir().join("lambda").join(bin).join("bootstrap");
        report_bootstrap(bin, &bootstrap)?;
    }
    Ok(())
}

/// `sam build -t infra/template.yaml --beta-features`, exactly as the README
/// documents it, with the SAM CLI and cargo-lambda from PyPI: SAM's
/// `rust-cargolambda` builder runs `cargo lambda build --release --arm64
/// --bin <Binary>` in each function's `CodeUri`. Then each artifact in
/// `.aws-sam/build/<Function>/bootstrap` must exist and be an arm64 ELF.
fn sam_build(args: &[String]) -> Result<()> {
    let (venv, path) = lambda_tools("sam-build", true)?;
    let mut c = Command::new(venv.join("sam"));
    c.current_dir(root())
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", target_dir())
        .env("SAM_CLI_TELEMETRY", "0")
        .args(["build", "-t", "infra/template.yaml", "--beta-features"])
        .args(args);
    run("sam-build", c)?;
    let build = root().join(".aws-sam").join("build");
    for function in SAM_FUNCTIONS {
        report_bootstrap(function, &build.join(function).join("bootstrap"))?;
    }
    Ok(())
}

/// The template's logical ids of the five functions.
const SAM_FUNCTIONS: [&str; 5] = ["Intake", "Schedule", "Launch", "Sweep", "Disrupt"];

/// Prints a built bootstrap's size; fails unless it is an arm64 ELF
/// executable (what `Architectures: [arm64]` runs).
fn report_bootstrap(name: &str, bootstrap: &Path) -> Result<()> {
    let bytes = std::fs::read(bootstrap)
        .with_context(|| format!("{} missing after the build", bootstrap.display()))?;
    // ELF magic, then e_machine (little-endian u16 at offset 18): 0xB7 = AArch64.
    let arm64 = bytes.starts_with(b"\x7fELF") && bytes.get(18..20) == Some(&[0xB7, 0x00][..]);
    if !arm64 {
        bail!("{} is not an arm64 ELF executable", bootstrap.display());
    }
    println!(
        "    {name}: {} ({:.1} MiB, arm64)",
        bootstrap.display(),
        bytes.len() as f64 / 1048576.0
    );
    Ok(())
}

fn demo(args: &[String]) -> Result<()> {
    let mut c = release_bin("flotilla-cli", "flotilla");
    c.arg("demo").args(args);
    run("demo", c)
}

fn catalog(args: &[String]) -> Result<()> {
    let script = root()
        .join("shared")
        .join("core")
        .join("data")
        .join("generate_catalog.py");
    if !script.exists() {
        bail!(
            "step `catalog`: {} does not exist (yet)",
            script.strip_prefix(root()).unwrap_or(&script).display()
        );
    }
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| probe(p, ["--version"]))
        .context("step `catalog`: no python3 on PATH")?;
    let mut c = Command::new(python);
    c.current_dir(root()).arg(&script).args(args);
    run("catalog", c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_arm64_elf_bootstraps_pass() {
        let dir = env::temp_dir().join(format!("xtask-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let header = |machine: u8| {
            let mut h = b"\x7fELF".to_vec();
            h.resize(18, 0);
            h.extend([machine, 0, 1, 0]);
            h
        };
        for (name, bytes, ok) in [
            ("arm64", header(0xB7), true),
            ("x86_64", header(0x3E), false),
            ("text", b"#!/bin/sh".to_vec(), false),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            assert_eq!(report_bootstrap(name, &p).is_ok(), ok, "{name}");
        }
        assert!(report_bootstrap("missing", &dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn libtest_summaries_add_up() {
        let lines = vec![
            "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s".to_string(),
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out".to_string(),
        ];
        assert_eq!(
            aggregate_libtest(&lines),
            vec!["5 passed, 1 failed, 1 ignored (2 test binaries)".to_string()]
        );
        assert!(aggregate_libtest(&[]).is_empty());
    }

    #[test]
    fn ansi_is_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[32;1m     Summary\u{1b}[0m [ 1.0s]"),
            "     Summary [ 1.0s]"
        );
    }
}
