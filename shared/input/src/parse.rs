//! Bytes to document values: UTF-8 check, size limit, JSON or YAML.

use serde::Deserialize;
use serde_json::Value;

use crate::{InputError, Source, MAX_DEPTH, MAX_SOURCE_BYTES};

/// Parses one source into its documents (nulls for empty YAML documents).
pub(crate) fn parse_source(src: &Source) -> Result<Vec<Value>, InputError> {
    if src.bytes.len() > MAX_SOURCE_BYTES {
        return Err(InputError::file(
            src.name,
            format!(
                "file is {} bytes, more than the limit of {MAX_SOURCE_BYTES} bytes",
                src.bytes.len()
            ),
        ));
    }
    let text = match std::str::from_utf8(src.bytes) {
        Ok(t) => t,
        Err(e) => {
            let at = e.valid_up_to();
            let line = src.bytes[..at].iter().filter(|b| **b == b'\n').count() + 1;
            return Err(InputError::file(
                src.name,
                format!("file is not valid UTF-8 (invalid byte sequence at byte offset {at}, line {line})"),
            ));
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first = text.bytes().find(|b| !b.is_ascii_whitespace());
    match first {
        None => Ok(Vec::new()),
        Some(b'{') | Some(b'[') => parse_json(src.name, text),
        Some(_) => parse_yaml(src.name, text),
    }
}

fn parse_json(name: &str, text: &str) -> Result<Vec<Value>, InputError> {
    let mut out = Vec::new();
    // A stream of JSON values (as `jq` writes); a top-level array is a list
    // of documents.
    for (i, v) in serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .enumerate()
    {
        let v = v.map_err(|e| InputError {
            file: name.to_string(),
            document: Some(i + 1),
            object: None,
            path: None,
            message: format!("invalid JSON: {e}"),
        })?;
        match v {
            Value::Array(items) => out.extend(items),
            other => out.push(other),
        }
    }
    Ok(out)
}

fn parse_yaml(name: &str, text: &str) -> Result<Vec<Value>, InputError> {
    if let Err((line, doc)) = yaml_depth_guard(text, MAX_DEPTH) {
        return Err(InputError {
            file: name.to_string(),
            document: Some(doc),
            object: None,
            path: None,
            message: format!(
                "invalid YAML: document nested more than {MAX_DEPTH} levels deep (at line {line})"
            ),
        });
    }
    let mut out = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let v = Value::deserialize(doc).map_err(|e| {
            let msg = e.to_string();
            let msg = if msg.contains("recursion limit exceeded") {
                format!("invalid YAML: document nested more than {} levels deep ({msg})", MAX_DEPTH)
            } else if msg.contains("repetition limit exceeded") {
                format!("invalid YAML: too many alias expansions, refusing a possible billion-laughs document ({msg})")
            } else {
                format!("invalid YAML: {msg}")
            };
            InputError {
                file: name.to_string(),
                document: Some(i + 1),
                object: None,
                path: None,
                message: msg,
            }
        })?;
        out.push(v);
    }
    Ok(out)
}

/// A linear pre-scan that estimates the nesting depth of a YAML text
/// (block indentation levels, compact `- - -` sequences and flow brackets)
/// and fails at the first line deeper than `max`, returning (line, document)
/// numbers from 1. libyaml's scanner is quadratic in the nesting depth, so
/// pathological inputs must be refused before they reach it; the estimate
/// errs on the side of counting too deep only for absurd inputs, and the
/// deserializer's own limit still applies to everything that passes.
fn yaml_depth_guard(text: &str, max: usize) -> Result<(), (usize, usize)> {
    let mut doc = 1;
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    let mut in_single = false;
    let mut in_double = false;
    let mut block_scalar_parent: Option<usize> = None;
    let mut seen_content = false;
    for (ln, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let indent = line.bytes().take_while(|b| *b == b' ').count();
        let rest = &line[indent..];
        if let Some(parent) = block_scalar_parent {
            if rest.trim().is_empty() || indent > parent {
                continue;
            }
            block_scalar_parent = None;
        }
        let mut bytes = rest.as_bytes();
        let depth_here;
        if flow == 0 && !in_single && !in_double {
            if rest.is_empty() || rest.starts_with('#') {
                continue;
            }
            if indent == 0 && (rest.starts_with("---") || rest.starts_with("...")) {
                if rest.starts_with("---") && seen_content {
                    doc += 1;
                }
                seen_content = false;
                indents.clear();
                bytes = &bytes[3..];
                depth_here = 0;
            } else {
                seen_content = true;
                while indents.last().is_some_and(|t| *t >= indent) {
                    indents.pop();
                }
                indents.push(indent);
                // Compact nested sequences: `- - - x`.
                let mut col = indent;
                while bytes.first() == Some(&b'-') && matches!(bytes.get(1), None | Some(b' ')) {
                    let skip = 1 + bytes[1..].iter().take_while(|b| **b == b' ').count();
                    col += skip;
                    indents.push(col);
                    bytes = &bytes[skip.min(bytes.len())..];
                }
                depth_here = indents.len();
            }
        } else {
            depth_here = indents.len();
        }
        if depth_here + flow > max {
            return Err((ln + 1, doc));
        }
        // Scan the rest of the line for flow brackets, quotes and comments.
        let mut token_start = true;
        let mut i = 0;
        let mut last_token_begin = 0;
        while i < bytes.len() {
            let c = bytes[i];
            if in_single {
                if c == b'\'' {
                    if bytes.get(i + 1) == Some(&b'\'') {
                        i += 1;
                    } else {
                        in_single = false;
                    }
                }
                i += 1;
                continue;
            }
            if in_double {
                if c == b'\\' {
                    i += 1;
                } else if c == b'"' {
                    in_double = false;
                }
                i += 1;
                continue;
            }
            match c {
                b'#' if token_start => break,
                b'\'' if token_start => in_single = true,
                b'"' if token_start => in_double = true,
                b'[' | b'{' if token_start => {
                    flow += 1;
                    if depth_here + flow > max {
                        return Err((ln + 1, doc));
                    }
                }
                b']' | b'}' if flow > 0 => flow -= 1,
                _ => {}
            }
            let ws = c == b' ' || c == b'\t';
            if ws && !token_start {
                last_token_begin = i + 1;
            }
            token_start = ws || (flow > 0 && matches!(c, b'[' | b'{' | b',' | b':'));
            i += 1;
        }
        // Block scalar header (`key: |`, `- >-`): skip its content lines.
        if flow == 0 && !in_single && !in_double {
            let trimmed = std::str::from_utf8(&bytes[..i]).unwrap_or("").trim_end();
            let last = trimmed
                .get(last_token_begin.min(trimmed.len())..)
                .unwrap_or("")
                .trim();
            let is_header = last.starts_with(['|', '>'])
                && last[1..]
                    .bytes()
                    .all(|b| b == b'-' || b == b'+' || b.is_ascii_digit());
            if is_header {
                block_scalar_parent = Some(indent);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_guard_accepts_ordinary_manifests() {
        let y = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x # [[[[\ndata:\n  s: |\n    [[[[[[[[[[[[[[[[[[[[\n    {{{{{{{{{{{{{{{{{\n  t: 'it''s [ {'\n  u: \"a [ \\\" {\"\n  v: [a, [b, {c: d}]]\n  w: don't [x\n---\nitems:\n- - - a\n  - b\n";
        assert_eq!(yaml_depth_guard(y, 6), Ok(()));
    }

    #[test]
    fn depth_guard_rejects_deep_nesting() {
        assert_eq!(
            yaml_depth_guard(&format!("x: {}", "[".repeat(200)), 128),
            Err((1, 1))
        );
        assert!(yaml_depth_guard(&format!("{}1", "- ".repeat(200)), 128).is_err());
        let mut y = String::from("a: 1\n---\n");
        for i in 0..200 {
            y.push_str(&format!("{}k{i}:\n", " ".repeat(i)));
        }
        assert_eq!(yaml_depth_guard(&y, 128).map_err(|e| e.1), Err(2));
        assert!(yaml_depth_guard(&format!("x: {}1", "{a: ".repeat(200)), 128).is_err());
        assert!(yaml_depth_guard(&format!("x: &a !!seq {}", "[".repeat(200)), 128).is_err());
        assert!(yaml_depth_guard(&format!("x: {}", "{\"a\":".repeat(200)), 128).is_err());
    }
}

#[cfg(test)]
mod corpus {
    /// `FLOTILLA_YAML_LIST=<file with paths> cargo test -p flotilla-input -- --ignored corpus`:
    /// the depth guard must accept every file that the YAML parser accepts.
    #[test]
    #[ignore]
    fn guard_accepts_real_yaml() {
        let Ok(list) = std::env::var("FLOTILLA_YAML_LIST") else {
            return;
        };
        let paths = std::fs::read_to_string(list).unwrap_or_default();
        let mut checked = 0;
        for p in paths.lines() {
            let Ok(text) = std::fs::read_to_string(p) else {
                continue;
            };
            let parses = serde_yaml_ng::Deserializer::from_str(&text)
                .all(|d| <serde_json::Value as serde::Deserialize>::deserialize(d).is_ok());
            if parses {
                checked += 1;
                assert_eq!(
                    super::yaml_depth_guard(&text, super::MAX_DEPTH),
                    Ok(()),
                    "{p}"
                );
            }
        }
        eprintln!("checked {checked} files");
    }
}
