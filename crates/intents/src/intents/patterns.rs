//! The `regex=` of `@kopf.on.log` handlers: Python patterns, matched here against every line
//! of the pods' logs, so that a line that matches no handler costs no Python. Python's
//! `re` builds the `match` kwarg only for the lines matched here.
//!
//! Most of Python's syntax means the same in the `regex` crate. What it cannot take
//! (look-arounds, backreferences, atomic groups, conditionals) fails at the declaration with
//! the crate's own explanation; `\Z` (Python's end of the text) is Rust's `\z`; the flags
//! become inline ones. Lines are bytes (a container may log anything): the bytes regex
//! matches them as they are, text or not.

use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;

/// Python's `re` flags (their values in the `re` module).
const IGNORECASE: u32 = 2;
const LOCALE: u32 = 4;
const MULTILINE: u32 = 8;
const DOTALL: u32 = 16;
const UNICODE: u32 = 32;
const VERBOSE: u32 = 64;
const DEBUG: u32 = 128;
const ASCII: u32 = 256;

/// The largest compiled pattern: a pattern is compiled once, but one that explodes (a big
/// bounded repetition of a Unicode class) would hold that memory for the operator's life.
const SIZE_LIMIT: usize = 4 << 20;

/// A log handler's `regex=`: a line matches if the pattern is found in it.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "PatternSpec")]
pub struct LogPattern {
    regex: Regex,
}

/// A pattern as the Python side declares it: `re.Pattern.pattern` and `.flags`.
#[derive(Debug, Deserialize)]
struct PatternSpec {
    pattern: String,
    flags: u32,
}

impl TryFrom<PatternSpec> for LogPattern {
    type Error = String;

    fn try_from(spec: PatternSpec) -> Result<Self, String> {
        LogPattern::new(&spec.pattern, spec.flags)
    }
}

impl LogPattern {
    /// A Python pattern with its flags (`re.Pattern.flags`), or why Rust cannot match it.
    pub fn new(pattern: &str, flags: u32) -> Result<Self, String> {
        if flags & LOCALE != 0 {
            return Err("re.LOCALE is for bytes patterns; a log line is text".into());
        }
        let known = IGNORECASE | MULTILINE | DOTALL | UNICODE | VERBOSE | DEBUG | ASCII;
        if flags & !known != 0 {
            return Err(format!("unknown flags: {:#x}", flags & !known));
        }
        let regex = RegexBuilder::new(&translated(pattern))
            .case_insensitive(flags & IGNORECASE != 0)
            .multi_line(flags & MULTILINE != 0)
            .dot_matches_new_line(flags & DOTALL != 0)
            .ignore_whitespace(flags & VERBOSE != 0)
            .unicode(flags & ASCII == 0)
            .size_limit(SIZE_LIMIT)
            .build()
            .map_err(|error| error.to_string())?;
        Ok(Self { regex })
    }

    /// Whether the pattern is found in the line.
    pub fn is_match(&self, line: &[u8]) -> bool {
        self.regex.is_match(line)
    }
}

/// Python's escapes that Rust spells differently: `\Z` (the end of the text) only. Escaped
/// backslashes stay as they are (`\\Z` is a backslash and a `Z` in both).
fn translated(pattern: &str) -> String {
    let mut text = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        text.push(c);
        if c == '\\' {
            match chars.next() {
                Some('Z') => text.push('z'),
                Some(next) => text.push(next),
                None => {}
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, flags: u32, line: &str) -> bool {
        LogPattern::new(pattern, flags)
            .unwrap()
            .is_match(line.as_bytes())
    }

    #[test]
    fn patterns_match_as_in_python() {
        assert!(matches(
            r"model accuracy is (\d+\.\d+)%",
            0,
            "epoch 3: model accuracy is 97.25%"
        ));
        assert!(!matches(
            r"model accuracy is (\d+\.\d+)%",
            0,
            "model accuracy is high"
        ));
        assert!(matches(
            r"^Traceback",
            0,
            "Traceback (most recent call last):"
        ));
        assert!(!matches(r"^Traceback", 0, "  Traceback"));
        assert!(matches(r"(?P<level>ERROR|WARN)\b", 0, "WARN: disk"));
        assert!(matches(r"done\Z", 0, "all done"));
        assert!(!matches(r"done\Z", 0, "done twice"));
        assert!(matches(r"a\\Z", 0, r"a\Z"));
        assert!(matches(r"\w+é", 0, "café"));
    }

    #[test]
    fn flags_are_pythons() {
        assert!(matches("error", IGNORECASE, "ERROR: x"));
        assert!(!matches("error", 0, "ERROR: x"));
        assert!(matches(r"a . b  # spaced", VERBOSE, "a.b"));
        assert!(matches(r"^\w+$", 0, "café"));
        assert!(!matches(r"^\w+$", ASCII, "café"));
        assert!(matches(r"^\w+$", ASCII, "cafe"));
    }

    #[test]
    fn what_rust_cannot_match_fails_with_its_reason() {
        for pattern in [r"(?=x)y", r"(?<!x)y", r"(a)\1", r"(?>a)"] {
            let error = LogPattern::new(pattern, 0).unwrap_err();
            assert!(!error.is_empty(), "{pattern}");
        }
        assert!(LogPattern::new(r"(?=x)y", 0)
            .unwrap_err()
            .contains("look-around"));
        assert!(LogPattern::new("x", LOCALE).unwrap_err().contains("LOCALE"));
    }

    #[test]
    fn lines_need_not_be_text() {
        let pattern = LogPattern::new("ok", 0).unwrap();
        assert!(pattern.is_match(b"\xff\xfe ok"));
    }
}
