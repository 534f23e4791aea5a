//! The repository's shape, checked: the core's layers depend one way (docs/DESIGN.md,
//! "Crates and folders"), the node runtime's modules import each other without cycles,
//! and no source file outside the tests reaches 1,000 lines.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The core's layers, lowest first: each may use only its own and lower layers.
const LAYERS: [(&str, &[&str]); 5] = [
    (
        "model",
        &[
            "model", "audit", "calendar", "cron", "entropy", "error", "job", "lapse", "name", "options", "rules",
            "schedule", "time", "timezone",
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

/// The top-level module a file under `root` belongs to (`poller` for `poller/cycle.rs`).
fn module_of(root: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(root).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_owned())
}

/// A cycle in `graph`, if there is one, as the modules along it.
fn find_cycle(graph: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, Vec<String>>,
        state: &mut BTreeMap<String, bool>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(true) => return None,
            Some(false) => {
                let start = path.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        state.insert(node.to_owned(), false);
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, state, path) {
                return Some(cycle);
            }
        }
        path.pop();
        state.insert(node.to_owned(), true);
        None
    }
    let mut state = BTreeMap::new();
    graph.keys().find_map(|node| visit(node, graph, &mut state, &mut Vec::new()))
}

#[test]
fn the_node_runtime_modules_import_each_other_without_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("actors/src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(&root, file) else { continue };
        if ["lib", "bin"].contains(&module.as_str()) {
            continue;
        }
        let text = fs::read_to_string(file).expect("readable source");
        let edges = graph.entry(module.clone()).or_default();
        for (_, line) in code_lines(&text) {
            for used in crate_paths(line) {
                if used != module && !edges.iter().any(|e| e == used) {
                    edges.push(used.to_owned());
                }
            }
        }
    }
    assert!(graph.len() > 20, "only {} modules found under {}", graph.len(), root.display());
    assert!(graph["node"].iter().any(|m| m == "poller"), "the supervisor spawns the poller: {:?}", graph["node"]);
    if let Some(cycle) = find_cycle(&graph) {
        panic!("actors/src modules import each other in a circle: {}", cycle.join(" → "));
    }
}
