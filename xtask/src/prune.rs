//! Keeps the shared build cache from growing without bound.
//!
//! The cache lives outside the clone (`$HOME/.cache/flotilla/target`) and
//! outlives every checkout: each change to a test crate leaves its old test
//! executable behind (a few hundred MB each with debug info), and a long
//! series of runs fills the disk. Before the tests run, every executable in
//! `debug/deps` that has a newer build of the same target beside it is
//! removed; libraries are left alone (cargo may still link them).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// `<name>-<16 hex digits>` with no extension: a test or bin executable
/// cargo left in `deps`. Returns `<name>`.
fn executable_stem(file_name: &str) -> Option<&str> {
    if file_name.contains('.') {
        return None;
    }
    let (stem, hash) = file_name.rsplit_once('-')?;
    (hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit())).then_some(stem)
}

/// The executables of `deps` that are older builds of a target with a newer
/// one present.
fn stale(deps: &Path) -> Vec<PathBuf> {
    let mut by_stem: BTreeMap<String, Vec<(SystemTime, PathBuf)>> = BTreeMap::new();
    let Ok(entries) = fs::read_dir(deps) else {
        return vec![];
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(stem) = name.to_str().and_then(executable_stem) else {
            continue;
        };
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        by_stem
            .entry(stem.to_string())
            .or_default()
            .push((modified, e.path()));
    }
    let mut out = vec![];
    for mut builds in by_stem.into_values() {
        builds.sort();
        builds.pop();
        out.extend(builds.into_iter().map(|(_, p)| p));
    }
    out
}

/// Removes the stale executables under `target/debug/deps`; prints what it
/// freed. Never fails the run: a file it cannot remove stays.
pub fn prune_stale_executables(target: &Path) {
    let mut freed = 0u64;
    let mut removed = 0usize;
    for p in stale(&target.join("debug").join("deps")) {
        let size = fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        if fs::remove_file(&p).is_ok() {
            freed = freed.saturating_add(size);
            removed += 1;
        }
    }
    if removed > 0 {
        println!(
            "    build cache: removed {removed} superseded test executables ({} MB)",
            freed / 1_000_000
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_stems() {
        let cases = [
            ("pipeline_moto-0123456789abcdef", Some("pipeline_moto")),
            ("flotilla_core-0123456789abcdef", Some("flotilla_core")),
            ("libflotilla_core-0123456789abcdef.rlib", None),
            ("flotilla_core-0123456789abcdef.d", None),
            ("flotilla_core-0123", None),
            ("flotilla_core-0123456789abcdeg", None),
            ("nohash", None),
        ];
        for (name, want) in cases {
            assert_eq!(executable_stem(name), want, "{name}");
        }
    }

    #[test]
    fn only_older_builds_of_the_same_target_are_stale() {
        let dir = std::env::temp_dir().join(format!("xtask-prune-{}", std::process::id()));
        let deps = dir.join("debug").join("deps");
        fs::create_dir_all(&deps).unwrap();
        let old = deps.join("model-0000000000000001");
        let new = deps.join("model-0000000000000002");
        let other = deps.join("agent-0000000000000003");
        let lib = deps.join("libmodel-0000000000000004.rlib");
        for p in [&old, &lib, &other] {
            fs::write(p, b"x").unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(&new, b"x").unwrap();
        assert_eq!(stale(&deps), vec![old.clone()]);
        prune_stale_executables(&dir);
        assert!(!old.exists() && new.exists() && other.exists() && lib.exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
