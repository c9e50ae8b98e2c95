//! The import graph of one crate's modules, read from its source, and the
//! circles in it (issue #38: gavel-raft, gavel-core, gavel-store and
//! gavel-server form a DAG of modules, types at the leaves).
//!
//! A module is a file (`lib.rs` is the root, `a/mod.rs` and `a.rs` are
//! `a`). Module `m` imports module `n` when its code (comments and its
//! `#[cfg(test)] mod tests` left out) names a path `crate::n::…` or
//! `super::…` that resolves to `n`, braces included (`use crate::{n::X,
//! o::Y}`), and a path `crate::Item` counts as the module the root
//! re-exports `Item` from (`pub use n::Item;`). A module may use its
//! ancestors: a submodule that adds `impl` blocks to its parent's type is
//! part of the parent, not a layer above or below it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`storage::wal`, `` for the root) → the modules it imports.
pub type Imports = BTreeMap<String, BTreeSet<String>>;

/// Module path → source text, for every `.rs` file under `src`.
pub fn read_crate(src: &Path) -> BTreeMap<String, String> {
    let mut modules = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let relative = path.strip_prefix(src).expect("under src").with_extension("");
                let mut parts: Vec<String> =
                    relative.components().map(|part| part.as_os_str().to_string_lossy().into_owned()).collect();
                if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    parts.pop();
                }
                modules.insert(parts.join("::"), std::fs::read_to_string(&path).expect("read a source file"));
            }
        }
    }
    modules
}

/// The source with comments, string literals' contents and the
/// `#[cfg(test)] mod …` blocks removed.
pub fn code_of(source: &str) -> String {
    let mut code = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for next in chars.by_ref() {
                    if next == '\n' {
                        code.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut last = ' ';
                for next in chars.by_ref() {
                    if last == '*' && next == '/' {
                        break;
                    }
                    last = next;
                }
            }
            '\'' => {
                // A character literal of a quote ('"' or '\"') is not a string.
                let ahead: String = chars.clone().take(3).collect();
                if ahead.starts_with("\"'") {
                    chars.nth(1);
                } else if ahead.starts_with("\\\"'") {
                    chars.nth(2);
                }
                code.push('\'');
            }
            '"' => {
                code.push('"');
                let mut escaped = false;
                for next in chars.by_ref() {
                    if !escaped && next == '"' {
                        break;
                    }
                    escaped = !escaped && next == '\\';
                }
                code.push('"');
            }
            _ => code.push(c),
        }
    }
    while let Some(start) = code.find("#[cfg(test)]") {
        let rest = code[start + "#[cfg(test)]".len()..].trim_start();
        let is_module = rest.starts_with("mod ") || rest.starts_with("pub mod ") || rest.starts_with("pub(crate) mod ");
        let Some(open) = code[start..].find(['{', ';']).map(|offset| start + offset) else { break };
        let end = if is_module && code.as_bytes()[open] == b'{' { matching_brace(&code, open) } else { open + 1 };
        code.replace_range(start..end, if is_module { "" } else { " " });
        if !is_module {
            // An attribute on another item: keep the item, drop the marker.
            continue;
        }
    }
    code
}

/// The index just past the brace that closes the one at `open`.
fn matching_brace(text: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (offset, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + offset + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// Every path named after `prefix::` (`crate` or `super`), as segments,
/// with brace groups expanded one item at a time.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let needle = format!("{prefix}::");
    let mut from = 0;
    while let Some(offset) = code[from..].find(&needle) {
        let start = from + offset;
        from = start + needle.len();
        // Not the tail of a longer path (`super::super::`, `x::crate`).
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        expand(&code[from..], Vec::new(), &mut found);
    }
    found
}

/// Reads the path at the start of `rest` (after a `::`), appending to
/// `base`; a `{…}` group expands to each of its items.
fn expand(rest: &str, base: Vec<String>, found: &mut Vec<Vec<String>>) {
    let mut path = base;
    let mut rest = rest;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let end = matching_brace(rest, 0) - 1;
            let mut depth = 0;
            let mut item_start = 0;
            let inner = &group[..end - 1];
            for (index, c) in inner.char_indices().chain(std::iter::once((inner.len(), ','))) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let item = inner[item_start..index].trim();
                        if !item.is_empty() {
                            expand(item, path.clone(), found);
                        }
                        item_start = index + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let segment: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if segment.is_empty() {
            break;
        }
        rest = &rest[segment.len()..];
        path.push(segment);
        match rest.strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    if !path.is_empty() {
        found.push(path);
    }
}

/// The root's re-exports: item name → the module path it comes from.
fn reexports(root: &str, modules: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut items = BTreeMap::new();
    for statement in root.split(';') {
        let Some(used) = statement.trim().strip_prefix("pub use ") else { continue };
        let mut paths = Vec::new();
        expand(used.trim(), Vec::new(), &mut paths);
        for path in paths {
            let Some((item, module)) = path.split_last() else { continue };
            let module = module.join("::");
            if !module.is_empty() && modules.contains_key(&module) {
                items.insert(item.clone(), module);
            }
        }
    }
    items
}

/// The longest module path that `path` starts with.
fn module_of(path: &[String], modules: &BTreeMap<String, String>) -> Option<String> {
    (1..=path.len()).rev().map(|length| path[..length].join("::")).find(|candidate| modules.contains_key(candidate))
}

/// The imports between the modules of one crate.
pub fn imports(modules: &BTreeMap<String, String>) -> Imports {
    let codes: BTreeMap<&String, String> = modules.iter().map(|(name, source)| (name, code_of(source))).collect();
    let root_items = codes.get(&String::new()).map(|root| reexports(root, modules)).unwrap_or_default();
    let mut graph = Imports::new();
    for (module, code) in &codes {
        let mut targets = BTreeSet::new();
        for mut path in paths_after(code, "crate") {
            if let Some(from) = path.first().and_then(|first| root_items.get(first)) {
                let mut resolved: Vec<String> = from.split("::").map(str::to_string).collect();
                resolved.extend(path.drain(1..));
                path = resolved;
            }
            targets.extend(module_of(&path, modules));
        }
        let own: Vec<String> = module.split("::").filter(|part| !part.is_empty()).map(str::to_string).collect();
        for path in paths_after(code, "super") {
            // `super::` is one level up, and each further `super` another.
            let ups = 1 + path.iter().take_while(|segment| *segment == "super").count();
            let base = &own[..own.len().saturating_sub(ups)];
            let full: Vec<String> = base.iter().cloned().chain(path.into_iter().skip(ups - 1)).collect();
            targets.extend(module_of(&full, modules));
        }
        let ancestors =
            |target: &String| target.is_empty() || *target == **module || module.starts_with(&format!("{target}::"));
        targets.retain(|target| !ancestors(target));
        graph.insert((*module).clone(), targets);
    }
    graph
}

/// The circles: every strongly connected set of two or more modules, each
/// sorted, with the imports among its members.
pub fn circles(graph: &Imports) -> Vec<BTreeMap<String, BTreeSet<String>>> {
    struct Walk<'a> {
        graph: &'a Imports,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<&'a str>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            let next = self.index.len();
            self.index.insert(node, next);
            self.low.insert(node, next);
            self.stack.push(node);
            self.on_stack.insert(node);
            for target in self.graph.get(node).into_iter().flatten() {
                if !self.index.contains_key(target.as_str()) {
                    self.visit(target);
                    let low = self.low[node].min(self.low[target.as_str()]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(target.as_str()) {
                    let low = self.low[node].min(self.index[target.as_str()]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut members = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    members.push(member);
                    if member == node {
                        break;
                    }
                }
                if members.len() > 1 {
                    self.found.push(members);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
        .into_iter()
        .map(|members| {
            let set: BTreeSet<&str> = members.iter().copied().collect();
            members
                .iter()
                .map(|member| {
                    let inside =
                        graph[*member].iter().filter(|target| set.contains(target.as_str())).cloned().collect();
                    ((*member).to_string(), inside)
                })
                .collect()
        })
        .collect()
}
