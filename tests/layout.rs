//! The repository's shape, checked: the core's layers depend one way (docs/DESIGN.md,
//! "Layers"), and no source file outside the tests reaches 1,000 lines.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The core's layers, lowest first: each may use only its own and lower layers.
const LAYERS: [(&str, &[&str]); 5] = [
    (
        "model",
        &[
            "model", "calendar", "cron", "entropy", "error", "job", "lapse", "name", "options", "rules", "schedule",
            "time", "timezone",
        ],
    ),
    ("kv", &["kv"]),
    ("store", &["store"]),
    ("cluster", &["cluster", "coordination", "leader"]),
    ("engine", &["engine", "housekeeping", "liveness", "local", "poll", "poller"]),
];

fn layer_of_module(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, modules)| modules.contains(&module))
}

/// The layer a file under `src/` belongs to: its first folder.
fn layer_of_file(relative: &Path) -> Option<usize> {
    let top = relative.components().next()?.as_os_str().to_str()?;
    LAYERS.iter().position(|(folder, _)| *folder == top)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments (line comments and doc comments; the core has
/// no block comments), so doc links do not count as dependencies.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.split("//").next().unwrap_or("")))
        .filter(|(_, l)| !l.trim().is_empty())
}

/// Every `crate::<module>` a line names.
fn crate_paths(line: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
        found.push(&after[..end]);
        rest = &after[end..];
    }
    found
}

#[test]
fn the_core_layers_depend_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    let mut checked = 0;
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        if relative == Path::new("lib.rs") {
            continue;
        }
        let Some(own) = layer_of_file(relative) else {
            violations.push(format!("{}: not in a layer folder ({:?})", relative.display(), LAYERS.map(|l| l.0)));
            continue;
        };
        checked += 1;
        let text = fs::read_to_string(file).expect("readable source");
        for (number, line) in code_lines(&text) {
            for module in crate_paths(line) {
                match layer_of_module(module) {
                    Some(used) if used > own => violations.push(format!(
                        "{}:{number}: the {} layer uses crate::{module} from the {} layer above it",
                        relative.display(),
                        LAYERS[own].0,
                        LAYERS[used].0
                    )),
                    Some(_) => {}
                    None => violations.push(format!(
                        "{}:{number}: crate::{module} is in no layer; add it to LAYERS in tests/layout.rs",
                        relative.display()
                    )),
                }
            }
        }
    }
    assert!(checked > 40, "only {checked} files found under {}", src.display());
    assert!(violations.is_empty(), "layering broken:\n{}", violations.join("\n"));
}

#[test]
fn every_crate_root_module_is_in_a_layer() {
    let lib = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).expect("lib.rs");
    let mut modules = BTreeMap::new();
    for (_, line) in code_lines(&lib) {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("pub mod ").or_else(|| line.strip_prefix("mod ")) {
            modules.insert(name.trim_end_matches(';').to_string(), layer_of_module(name.trim_end_matches(';')));
        }
    }
    assert!(modules.len() >= 5, "lib.rs declares {modules:?}");
    let orphans: Vec<_> = modules.iter().filter(|(_, layer)| layer.is_none()).map(|(name, _)| name).collect();
    assert!(orphans.is_empty(), "modules in no layer: {orphans:?}");
}

#[test]
fn no_source_file_outside_the_tests_reaches_1000_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "actors/src", "actors/benches", "actors/examples", "simulations/src", "test-support/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 80, "only {} source files found", files.len());
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = fs::read_to_string(file).ok()?.lines().count();
            (lines >= 1000).then(|| format!("{}: {lines} lines", file.strip_prefix(root).unwrap_or(file).display()))
        })
        .collect();
    long.sort();
    assert!(long.is_empty(), "split these by concept:\n{}", long.join("\n"));
}
