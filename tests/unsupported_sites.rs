//! Issue 17's inventory gate: every place the emitter refuses a program
//! (`CodegenError::unsupported(construct, ..)` in `src/codegen/`) is listed in
//! `tests/data/unsupported_sites.txt` with what stands behind it:
//! * `pending` — vyre-reference runs such programs; lowering them is open work (the README's
//!   "Not yet lowered" list and issue 17);
//! * `reference-rejects <test>` — the reference (or vyre's validator before it) refuses such
//!   programs too, as the named test shows;
//! * `future` — a variant of vyre's `#[non_exhaustive]` IR this emitter predates, or one the
//!   IR cannot express today (no program reaches it).
//!
//! A new refusal without an entry fails this test, and so does an entry whose site is gone,
//! so the list stays the emitter's exact work order. A site is the file and the text of the
//! refusal's first argument (the construct it names).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const CALL: &str = "CodegenError::unsupported(";

/// The first argument of every refusal in `text`, whitespace collapsed.
fn constructs(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(CALL) {
        rest = &rest[at + CALL.len()..];
        let (mut depth, mut quoted, mut escaped, mut end) = (0i32, false, false, rest.len());
        for (i, c) in rest.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                '(' | '[' | '{' if !quoted => depth += 1,
                ')' | ']' | '}' if !quoted && depth == 0 => {
                    end = i;
                    break;
                }
                ')' | ']' | '}' if !quoted => depth -= 1,
                ',' if !quoted && depth == 0 => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        found.push(rest[..end].split_whitespace().collect::<Vec<_>>().join(" "));
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/codegen is readable") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `(file relative to the crate, construct)` -> how many sites.
fn sites() -> BTreeMap<(String, String), usize> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/codegen"), &mut files);
    let mut sites = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source is readable");
        let name = file
            .strip_prefix(root)
            .expect("under the crate")
            .to_string_lossy()
            .replace('\\', "/");
        for construct in constructs(&text) {
            *sites.entry((name.clone(), construct)).or_insert(0) += 1;
        }
    }
    sites
}

/// The inventory: `file | construct | class`, `#` comments.
fn inventory() -> BTreeMap<(String, String), String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/unsupported_sites.txt");
    let text = std::fs::read_to_string(&path).expect("tests/data/unsupported_sites.txt");
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
        .map(|line| {
            let fields: Vec<&str> = line.splitn(3, " | ").map(str::trim).collect();
            assert_eq!(fields.len(), 3, "malformed inventory line: {line}");
            ((fields[0].into(), fields[1].into()), fields[2].into())
        })
        .collect()
}

/// Test names defined in `tests/*.rs` (for `reference-rejects <test>`).
fn test_names() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).expect("tests/ is readable") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("test source");
            names.extend(
                text.split("#[test]")
                    .skip(1)
                    .filter_map(|after| after.split("fn ").nth(1))
                    .filter_map(|sig| sig.split('(').next())
                    .map(|name| name.trim().to_string()),
            );
        }
    }
    names
}

#[test]
fn every_refusal_of_the_emitter_is_accounted_for() {
    let sites = sites();
    let listed = inventory();
    assert!(
        sites.len() > 20,
        "the scan found only {} sites",
        sites.len()
    );
    let unlisted: Vec<_> = sites.keys().filter(|s| !listed.contains_key(*s)).collect();
    let gone: Vec<_> = listed.keys().filter(|s| !sites.contains_key(*s)).collect();
    assert!(
        unlisted.is_empty(),
        "refusals missing from tests/data/unsupported_sites.txt (add each with its class):\n{}",
        unlisted
            .iter()
            .map(|(file, construct)| format!("{file} | {construct} | pending"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        gone.is_empty(),
        "inventory entries whose refusal is gone: {gone:?}"
    );
    let tests = test_names();
    for ((file, construct), class) in &listed {
        let mut words = class.split_whitespace();
        match (words.next(), words.next()) {
            (Some("pending" | "future"), None) => {}
            (Some("reference-rejects"), Some(test)) => assert!(
                tests.iter().any(|t| t == test),
                "{file} | {construct}: no test named `{test}` in tests/"
            ),
            _ => panic!("{file} | {construct}: unknown class `{class}`"),
        }
    }
    let count = |class: &str| listed.values().filter(|c| c.starts_with(class)).count();
    println!(
        "{} refusal sites: {} pending (issue 17), {} refused by the reference too, {} future IR",
        listed.len(),
        count("pending"),
        count("reference-rejects"),
        count("future")
    );
}
