//! The INI reader: sections, `key = value` / `key: value` lines, continuation lines, comments
//! and line numbers (the "Format" rules of the [module documentation](super)). It yields the
//! `[zkdeployment]` entries as written, before any indirection or validation.

use std::collections::HashMap;
use std::path::Path;

use super::error::quote;
use super::{ConfigError, SECRET_KEY, SECTION};

pub(super) struct Entry {
    pub(super) value: String,
    pub(super) line: usize,
}

/// The `[zkdeployment]` entries in file order (key, entry); `NoSection` if there is none.
pub(super) fn read_ini(path: &Path, text: &str) -> Result<Vec<(String, Entry)>, ConfigError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut entries: Vec<(String, Entry)> = Vec::new();
    let mut first_line: HashMap<String, usize> = HashMap::new();
    let mut section_line: Option<usize> = None;
    let mut in_any_section = false;
    let mut in_ours = false;
    // The indentation of the last key line, while continuation lines may follow it.
    let mut current: Option<usize> = None;

    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let stripped = raw.trim();
        if stripped.is_empty() || stripped.starts_with('#') || stripped.starts_with(';') {
            continue;
        }
        let indent = raw.chars().take_while(|c| c.is_whitespace()).count();
        // A continuation line: part of the value of the key line above.
        if current.is_some_and(|key_indent| indent > key_indent) {
            if let Some((_, entry)) = entries.last_mut().filter(|_| in_ours) {
                continue_value(&mut entry.value, stripped);
            }
            continue;
        }
        if stripped.len() >= 2 && stripped.starts_with('[') && stripped.ends_with(']') {
            let name = &stripped[1..stripped.len() - 1];
            in_any_section = true;
            current = None;
            in_ours = name == SECTION;
            if in_ours {
                if let Some(first) = section_line {
                    return Err(ConfigError::DuplicateSection {
                        path: path.to_path_buf(),
                        line,
                        first,
                    });
                }
                section_line = Some(line);
            }
            continue;
        }
        let Some(split) = stripped.find(['=', ':']) else {
            return Err(syntax(path, line, stripped));
        };
        let key = stripped[..split].trim();
        let value = stripped[split + 1..].trim();
        if key.is_empty() {
            return Err(syntax(path, line, stripped));
        }
        if !in_any_section {
            return Err(ConfigError::NoSectionHeader {
                path: path.to_path_buf(),
                line,
            });
        }
        current = Some(indent);
        if !in_ours {
            continue;
        }
        if let Some(&first) = first_line.get(key) {
            return Err(ConfigError::DuplicateKey {
                path: path.to_path_buf(),
                line,
                key: key.to_string(),
                first,
            });
        }
        first_line.insert(key.to_string(), line);
        let value = value.to_string();
        entries.push((key.to_string(), Entry { value, line }));
    }
    if section_line.is_none() {
        return Err(ConfigError::NoSection {
            path: path.to_path_buf(),
        });
    }
    Ok(entries)
}

/// Adds a continuation line (`stripped`) to a value, on a line of its own unless the value
/// is empty.
fn continue_value(value: &mut String, stripped: &str) {
    if !value.is_empty() {
        value.push('\n');
    }
    value.push_str(stripped);
}

fn syntax(path: &Path, line: usize, text: &str) -> ConfigError {
    let text = if text.contains(SECRET_KEY) {
        "(not shown: it mentions zookeeper-auth)".to_string()
    } else {
        quote(text)
    };
    ConfigError::Syntax {
        path: path.to_path_buf(),
        line,
        text,
    }
}
