//! The developers' guide's rule that no function in `src/` is over 80 lines, read from the
//! sources (formatted by rustfmt: a function's body ends with a `}` at the indentation of its
//! `fn`), so a long function fails here, naming it.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 80;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `line` starts a function (`fn`, after any of `pub(…)`, `const`, `async`,
/// `unsafe`, `extern "C"`).
fn starts_fn(line: &str) -> bool {
    let mut rest = line.trim_start();
    loop {
        let next = [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ]
        .iter()
        .find_map(|q| rest.strip_prefix(q))
        .or_else(|| rest.strip_prefix("extern \"C\" "));
        match next {
            Some(r) => rest = r,
            None => return rest.starts_with("fn "),
        }
    }
}

/// The functions of `text` over `max` lines: (first line number, lines, the `fn` line).
fn long_functions(text: &str, max: usize) -> Vec<(usize, usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !starts_fn(line) {
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let close = format!("{indent}}}");
        let mut opened = false;
        for (j, later) in lines.iter().enumerate().skip(i) {
            let later = later.trim_end();
            // A declaration without a body, or a body on one line.
            if (!opened && later.ends_with(';')) || (j == i && later.ends_with('}')) {
                break;
            }
            opened |= later.ends_with('{');
            if later == close {
                let n = j - i + 1;
                if n > max {
                    out.push((i + 1, n, line.trim().to_string()));
                }
                break;
            }
        }
    }
    out
}

#[test]
fn no_function_in_src_is_over_80_lines() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let relative = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, n, head) in long_functions(&text, MAX_LINES) {
            found.push(format!("{relative}:{at}: {n} lines: {head}"));
        }
    }
    assert!(
        found.is_empty(),
        "functions over {MAX_LINES} lines (split them into named steps):\n{}",
        found.join("\n")
    );
}

/// The counting itself: a long function is found, with its length; a short one, a
/// declaration and a one-line body are not.
#[test]
fn the_count_finds_a_long_function() {
    let body = "    let x = 1;\n".repeat(81);
    let text = format!(
        "trait T {{\n    fn declared(\n        &self,\n    ) -> u8;\n    fn given(&self) {{}}\n}}\n\n\
         fn short() -> u8 {{ 1 }}\n\n\
         pub(crate) async fn long() {{\n{body}}}\n\nfn after() {{\n    let y = 2;\n}}\n"
    );
    let found = long_functions(&text, MAX_LINES);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, 83);
    assert_eq!(found[0].2, "pub(crate) async fn long() {");
}
