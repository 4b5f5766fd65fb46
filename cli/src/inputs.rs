//! Reading `-f` arguments: files, directories and stdin.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// One input: a name for errors and warnings plus its bytes.
#[derive(Debug, Clone)]
pub struct Input {
    pub name: String,
    pub bytes: Vec<u8>,
}

impl Input {
    pub fn source(&self) -> flotilla_input::Source<'_> {
        flotilla_input::Source {
            name: &self.name,
            bytes: &self.bytes,
        }
    }
}

/// Reads every `-f` argument in order: `-` is stdin (once), a directory
/// contributes its `*.yaml`, `*.yml` and `*.json` files in name order
/// (not recursive).
pub fn read_all(args: &[String]) -> Result<Vec<Input>> {
    let mut out = Vec::new();
    let mut stdin_read = false;
    for a in args {
        if a == "-" {
            if stdin_read {
                bail!("`-f -` (stdin) given more than once");
            }
            stdin_read = true;
            let mut bytes = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut bytes)
                .context("reading stdin")?;
            out.push(Input {
                name: "<stdin>".to_string(),
                bytes,
            });
            continue;
        }
        let path = Path::new(a);
        let meta = std::fs::metadata(path).with_context(|| format!("reading {a}"))?;
        if meta.is_dir() {
            let mut files = Vec::new();
            for entry in std::fs::read_dir(path).with_context(|| format!("reading {a}"))? {
                let p = entry.with_context(|| format!("reading {a}"))?.path();
                let is_input = p
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
                if is_input && p.is_file() {
                    files.push(p);
                }
            }
            files.sort();
            if files.is_empty() {
                bail!("{a}: directory has no *.yaml, *.yml or *.json files");
            }
            for p in files {
                let bytes =
                    std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
                out.push(Input {
                    name: p.display().to_string(),
                    bytes,
                });
            }
        } else {
            let bytes = std::fs::read(path).with_context(|| format!("reading {a}"))?;
            out.push(Input {
                name: a.clone(),
                bytes,
            });
        }
    }
    Ok(out)
}
