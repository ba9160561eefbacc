//! Names that look identical but differ: two Unicode spellings of one name (`café` written
//! with `é`, NFC, or with `e` and a combining accent, NFD) are two different ZooKeeper nodes
//! that an operator cannot tell apart. [`same_spellings`] finds them among siblings (canonical
//! equivalence, Unicode's NFC); [`shown`] writes a name so that the two can be told apart.
//! Pure, no I/O.

use std::borrow::Cow;
use std::collections::BTreeMap;

use icu_normalizer::ComposingNormalizerBorrowed;

/// The names of `names` that have another spelling among them, in groups of two or more:
/// the composed spelling (NFC) first when it is among them, the others in the order given.
/// ASCII names have one spelling and cost nothing.
pub(crate) fn same_spellings<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<Vec<&'a str>> {
    let nfc = ComposingNormalizerBorrowed::new_nfc();
    let mut groups: BTreeMap<Cow<'a, str>, Vec<&'a str>> = BTreeMap::new();
    for name in names {
        if !name.is_ascii() {
            groups.entry(nfc.normalize(name)).or_default().push(name);
        }
    }
    groups
        .into_iter()
        .filter(|(_, g)| g.len() > 1)
        .map(|(composed, mut group)| {
            group.sort_by_key(|name| *name != composed);
            group
        })
        .collect()
}

/// `name` quoted, with every character outside printable ASCII written as `\u{…}`, so that
/// two spellings of one name read differently.
pub(crate) fn shown(name: &str) -> String {
    let mut out = String::from("'");
    for c in name.chars() {
        if c.is_ascii_graphic() || c == ' ' {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nfc_and_nfd_spellings_are_one_name() {
        let nfc = "caf\u{e9}";
        let nfd = "cafe\u{301}";
        assert_eq!(same_spellings([nfc, "cafe", nfd]), vec![vec![nfc, nfd]]);
        assert_eq!(same_spellings([nfd, nfc]), vec![vec![nfc, nfd]]);
        // Hangul syllable and its jamo; a precomposed letter with two marks in either order.
        let hangul = ["\u{ac00}", "\u{1100}\u{1161}"];
        assert_eq!(same_spellings(hangul), vec![hangul.to_vec()]);
        let marks = ["\u{1e69}", "s\u{323}\u{307}", "s\u{307}\u{323}"];
        assert_eq!(same_spellings(marks), vec![marks.to_vec()]);
    }

    #[test]
    fn different_names_and_ascii_are_not_grouped() {
        assert!(same_spellings(["cafe", "caf\u{e9}", "caf\u{e8}", "CAF\u{c9}"]).is_empty());
        // Compatibility forms (a ligature) are other names, not other spellings.
        assert!(same_spellings(["\u{fb01}le", "file"]).is_empty());
        assert!(same_spellings(["a", "a"]).is_empty());
    }

    #[test]
    fn shown_tells_spellings_apart() {
        assert_eq!(shown("caf\u{e9}"), "'caf\\u{e9}'");
        assert_eq!(shown("cafe\u{301}"), "'cafe\\u{301}'");
        assert_eq!(shown("a b,c"), "'a b,c'");
    }
}
