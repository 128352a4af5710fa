//! The core's layering is the diagram in rust/core/lib.rs: every module of the crate sits on
//! one line of it, and a module's `crate::` paths name only modules on lines below its own.
//! The diagram is the one statement of the order; this test reads it and every source file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const CORE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/rust/core");

/// The layers of lib.rs's ```text diagram, top first: each line lists one layer's modules
/// (comma-separated, before any parenthesised note).
fn diagram(lib: &str) -> Vec<Vec<String>> {
    let mut layers = Vec::new();
    let mut inside = false;
    for line in lib.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            continue;
        };
        let doc = doc.trim();
        if doc == "```text" {
            inside = true;
            continue;
        }
        if inside && doc.starts_with("```") {
            break;
        }
        if !inside || doc.is_empty() {
            continue;
        }
        let names = doc.split('(').next().unwrap_or("");
        let names = names.trim().trim_start_matches("->").trim();
        layers.push(
            names
                .split(',')
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect(),
        );
    }
    layers
}

/// The `pub mod` names declared in lib.rs.
fn declared_modules(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').trim().to_string())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read rust/core") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of rust/core belongs to (`None`: lib.rs, the root).
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(CORE).expect("under rust/core");
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.strip_suffix(".rs") {
        Some("lib") => None,
        Some(m) => Some(m.to_string()),
        None => Some(first),
    }
}

/// The top-level modules named by `crate::` paths in `source`, outside comments, each with
/// the line it is on. A group (`use crate::{a, b::c}`, on one line or several) names each of
/// its top-level members.
fn crate_paths(source: &str) -> Vec<(String, usize)> {
    let code: String = source
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("crate::") {
        let at = from + found;
        from = at + "crate::".len();
        // Part of a longer identifier (`my_crate::`): not this crate.
        if code[..at]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &code[from..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level members of the group: the names at brace depth 0 that start an item.
            let (mut depth, mut start) = (0usize, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && (c.is_alphanumeric() || c == '_') => {
                        out.push((ident(&group[i..]), line_of(from + 1 + i)));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.push((name, line_of(at)));
            }
        }
    }
    out
}

/// Every edge from a module to one not strictly below it, as "file:line: a -> b".
fn upward_imports(layers: &[Vec<String>], files: &[(PathBuf, String)]) -> Vec<String> {
    // Layer 0 is the top line of the diagram.
    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().map(move |m| (m.as_str(), i)))
        .collect();
    let mut bad = Vec::new();
    for (path, source) in files {
        let Some(from) = module_of(path) else {
            continue;
        };
        let Some(&from_rank) = rank.get(from.as_str()) else {
            bad.push(format!(
                "{}: module {from} is not in the diagram",
                path.display()
            ));
            continue;
        };
        for (to, line) in crate_paths(source) {
            if to == from {
                continue;
            }
            match rank.get(to.as_str()) {
                Some(&to_rank) if to_rank > from_rank => {}
                Some(_) => bad.push(format!("{}:{line}: {from} -> {to}", path.display())),
                None => bad.push(format!(
                    "{}:{line}: {from} -> {to}, which is not in the diagram",
                    path.display()
                )),
            }
        }
    }
    bad
}

fn core_sources() -> Vec<(PathBuf, String)> {
    let mut paths = Vec::new();
    rust_files(Path::new(CORE), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let s = std::fs::read_to_string(&p).expect("read source");
            (p, s)
        })
        .collect()
}

#[test]
fn every_module_is_on_one_line_of_the_diagram() {
    let lib = std::fs::read_to_string(Path::new(CORE).join("lib.rs")).expect("read lib.rs");
    let layers = diagram(&lib);
    assert!(layers.len() > 5, "the diagram was found: {layers:?}");
    let mut placed: Vec<&String> = layers.iter().flatten().collect();
    placed.sort();
    let mut declared = declared_modules(&lib);
    declared.sort();
    assert_eq!(
        placed.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        declared.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "each `pub mod` of lib.rs appears exactly once in its diagram"
    );
}

#[test]
fn no_module_imports_one_on_its_own_line_or_above() {
    let lib = std::fs::read_to_string(Path::new(CORE).join("lib.rs")).expect("read lib.rs");
    let bad = upward_imports(&diagram(&lib), &core_sources());
    assert!(
        bad.is_empty(),
        "imports against the diagram in rust/core/lib.rs:\n{}",
        bad.join("\n")
    );
}

#[test]
fn an_upward_import_is_reported() {
    let layers = vec![vec!["store".to_string()], vec!["flush".to_string()]];
    let file = |m: &str, s: &str| (Path::new(CORE).join(format!("{m}.rs")), s.to_string());
    let files = vec![
        file("flush", "fn f() { crate::store::release_pages(); }\n"),
        file("store", "use crate::{flush::FlushService, error::Error};\n"),
        file(
            "flush",
            "use crate::{\n    service::Service,\n    store::{Store, X},\n};\n",
        ),
    ];
    let bad = upward_imports(&layers, &files);
    assert_eq!(bad.len(), 4, "{bad:?}");
    assert!(bad[0].ends_with(":1: flush -> store"), "{bad:?}");
    assert!(
        bad[1].ends_with("store -> error, which is not in the diagram"),
        "{bad:?}"
    );
    // A group over several lines: each top-level member, on its own line.
    assert!(
        bad[2].ends_with(":2: flush -> service, which is not in the diagram"),
        "{bad:?}"
    );
    assert!(bad[3].ends_with(":3: flush -> store"), "{bad:?}");
    // Comments name modules freely.
    let commented = vec![file("flush", "// see crate::store::release_pages\n")];
    assert!(upward_imports(&layers, &commented).is_empty());
}

/// Where code outside rust/core/consume_queue/ may name the consume queues, and on how many
/// lines: everything else reaches them through the derived-store and queue-index traits
/// (dispatch/derived.rs, dispatch/queue_index.rs).
const CONSUME_QUEUE_NAMED: &[(&str, usize)] = &[
    // The registration: the import, the name the checkpoint records, the construction.
    ("store/open.rs", 3),
    // The unit size, a fact of the geometry the meta file records (FORMAT.md §11).
    ("store_meta/mod.rs", 1),
    ("store_meta/derive.rs", 1),
    // Verification reads every unit file as FORMAT.md §4 lays it out, reading only, and
    // checks it against the commit log: the import and the unit's decoding.
    ("verify/queues.rs", 4),
];

/// The lines of `source`, outside comments, that name the consume-queue module or its types.
fn consume_queue_mentions(source: &str) -> Vec<usize> {
    let names = |code: &str| {
        let bytes = code.as_bytes();
        let starts_word = |at: usize| {
            at == 0 || {
                let c = bytes[at - 1] as char;
                !(c.is_alphanumeric() || c == '_')
            }
        };
        ["consume_queue::", "ConsumeQueue", "CqUnit"]
            .iter()
            .any(|n| code.match_indices(n).any(|(at, _)| starts_word(at)))
    };
    source
        .lines()
        .enumerate()
        .filter(|(_, l)| names(l.split("//").next().unwrap_or("")))
        .map(|(i, _)| i + 1)
        .collect()
}

/// Every file outside consume_queue/ that names it on more lines than `allowed` lets it.
fn unregistered_consume_queue_uses(
    files: &[(PathBuf, String)],
    allowed: &[(&str, usize)],
) -> Vec<String> {
    let mut bad = Vec::new();
    for (path, source) in files {
        let rel = path.strip_prefix(CORE).expect("under rust/core");
        let rel = rel.to_string_lossy().replace('\\', "/");
        if rel.starts_with("consume_queue/") {
            continue;
        }
        let lines = consume_queue_mentions(source);
        let limit = allowed
            .iter()
            .find(|(f, _)| *f == rel)
            .map_or(0, |&(_, n)| n);
        if lines.len() > limit {
            bad.push(format!(
                "{}: names the consume queues on lines {lines:?} (allowed: {limit})",
                path.display()
            ));
        }
    }
    bad
}

#[test]
fn consume_queues_are_named_only_by_their_module_and_the_registration() {
    let bad = unregistered_consume_queue_uses(&core_sources(), CONSUME_QUEUE_NAMED);
    assert!(
        bad.is_empty(),
        "go through dispatch::derived::DerivedStore or dispatch::queue_index::QueueIndex:\n{}",
        bad.join("\n")
    );
}

#[test]
fn a_direct_consume_queue_use_is_reported() {
    let file = |rel: &str, s: &str| (Path::new(CORE).join(rel), s.to_string());
    let files = vec![
        file("store/read.rs", "use crate::consume_queue::ConsumeQueue;\n"),
        file(
            "store/open.rs",
            "use crate::consume_queue::store::ConsumeQueueStore;\n",
        ),
        file(
            "recovery.rs",
            "fn f(q: &super::consume_queue::unit::CqUnit) {}\n",
        ),
        // Comments, longer identifiers and the module's own files are not uses.
        file(
            "flush.rs",
            "// crate::consume_queue::ConsumeQueue\nlet consume_queue_file_units = 1;\n",
        ),
        file("store/mod.rs", "struct MyConsumeQueueView;\n"),
        file(
            "consume_queue/store.rs",
            "use crate::consume_queue::ConsumeQueue;\n",
        ),
    ];
    let bad = unregistered_consume_queue_uses(&files, &[("store/open.rs", 1)]);
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(
        bad[0].contains("store/read.rs: names the consume queues on lines [1]"),
        "{bad:?}"
    );
    assert!(bad[1].contains("recovery.rs"), "{bad:?}");
}

/// What the binding (rust/py) must not use to read a stored record: the codec's layout and
/// the helpers behind the view API. It reads records through `RecordView` (message/view.rs).
const RECORD_INTERNALS: &[&str] = &[
    "codec::",
    "properties::get",
    "properties::decode",
    "decoded_body",
    "msg_id::offset_msg_id",
    "STORE_HOST",
];

#[test]
fn the_binding_reads_records_only_through_the_view_api() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("rust/py/src");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(!files.is_empty(), "rust/py/src was found");
    let mut bad = Vec::new();
    for path in files {
        let source = std::fs::read_to_string(&path).expect("read source");
        for (i, line) in source.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            // A method call (`view.decoded_body()`) is the view API itself, not the helper.
            let used = |n: &&&str| {
                code.match_indices(**n)
                    .any(|(i, _)| !code[..i].ends_with('.'))
            };
            for name in RECORD_INTERNALS.iter().filter(used) {
                bad.push(format!("{}:{}: {name}", path.display(), i + 1));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "use RecordView's methods:\n{}",
        bad.join("\n")
    );
}

/// The files of the crate allowed `unsafe` code: the mmap fence (mapped_file/mmap.rs, whose
/// contract names both) and the robust mutex it hands its bytes to.
const UNSAFE_FENCE: &[&str] = &["mapped_file/mmap.rs", "mapped_file/robust.rs"];

/// The files of rust/core that allow `unsafe_code` (the crate denies it everywhere else).
fn unsafe_allowed(files: &[(PathBuf, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(_, s)| {
            s.lines().any(|l| {
                l.split("//")
                    .next()
                    .unwrap_or("")
                    .contains("allow(unsafe_code)")
            })
        })
        .map(|(p, _)| {
            let rel = p.strip_prefix(CORE).expect("under rust/core");
            rel.to_string_lossy().replace('\\', "/")
        })
        .collect()
}

#[test]
fn unsafe_code_lives_only_in_the_mmap_fence() {
    let mut found = unsafe_allowed(&core_sources());
    found.sort();
    assert_eq!(
        found, UNSAFE_FENCE,
        "only the mmap fence may allow unsafe code"
    );
    let lib = std::fs::read_to_string(Path::new(CORE).join("lib.rs")).expect("read lib.rs");
    assert!(
        lib.contains("#![deny(unsafe_code)]"),
        "the crate denies unsafe code"
    );
}
