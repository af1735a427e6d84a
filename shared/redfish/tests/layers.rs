//! The crate stays in layers (`src/lib.rs`): every module uses only the
//! modules of lower layers (or its own). Read from the sources, so a new
//! `crate::…` path that reaches up fails here, naming the file.

use std::collections::BTreeMap;
use std::path::Path;

/// Each module's layer, as `src/lib.rs` lists them.
const LAYERS: &[(&str, u8)] = &[
    ("credentials", 1),
    ("kind", 1),
    ("sse", 1),
    ("conn", 2),
    ("discover", 3),
    ("events", 3),
    ("power", 4),
    ("firmware", 4),
    ("probe", 4),
    ("manager", 5),
    ("lifecycle", 4),
];

/// The module a source file belongs to (`shared/redfish/src/conn/pool.rs`
/// is in `conn`).
fn module_of(relative: &Path) -> String {
    let first = relative
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_owned()
}

/// The crate modules a source names (`crate::x`, `use crate::{x, …}`),
/// tests and comments left out.
fn uses(source: &str) -> Vec<String> {
    let code = source.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(list) = rest.strip_prefix('{') {
                let end = list.find('}').unwrap_or(list.len());
                found.extend(
                    list[..end]
                        .split(',')
                        .map(|s| s.trim().split("::").next().unwrap_or_default().to_owned()),
                );
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                found.push(name);
            }
        }
    }
    found
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the crate's sources") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let layer: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut checked = 0;
    let mut upward = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let module = module_of(relative);
        if module == "lib" {
            continue;
        }
        let own = *layer
            .get(module.as_str())
            .unwrap_or_else(|| panic!("{} is in no layer of LAYERS", relative.display()));
        let source = std::fs::read_to_string(&file).expect("readable source");
        for used in uses(&source) {
            let Some(&theirs) = layer.get(used.as_str()) else {
                // A re-export of lib.rs hides where it lives: below the
                // top, name the module.
                if own < 5 && !used.is_empty() {
                    upward.push(format!(
                        "{} (layer {own}) uses crate::{used}: name its module",
                        relative.display()
                    ));
                }
                continue;
            };
            checked += 1;
            if used != module && theirs >= own {
                upward.push(format!(
                    "{} (layer {own}) uses {used} (layer {theirs})",
                    relative.display()
                ));
            }
        }
    }
    assert!(
        checked > 10,
        "the check found too few uses to mean anything"
    );
    assert!(upward.is_empty(), "uses that reach up: {upward:#?}");
}

#[test]
fn the_reader_finds_uses_in_paths_and_lists() {
    let source = "use crate::conn::Session;\nuse crate::{kind::Kind, sse};\n// crate::manager\nlet x = crate::discover::ROOT;\n#[cfg(test)]\nuse crate::manager;";
    assert_eq!(uses(source), ["conn", "kind", "sse", "discover"]);
}
