//! JSON text exactly as Python's `json.dumps(value, separators=(',', ':'))` writes it,
//! so that what we store in annotations is byte-identical to what Kopf stores.
//! The difference from serde_json's compact form: non-ASCII characters are escaped
//! (`ensure_ascii=True`), and floats are written as Python's `repr()` writes them.

use serde_json::Value;
use std::fmt::Write;

pub(crate) fn to_python_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                write_float(out, f);
            } else {
                let _ = write!(out, "{n}");
            }
        }
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(fields) => {
            out.push('{');
            for (i, (key, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `float.__repr__`: the shortest round-tripping digits, with `.0` for integral
/// values and an exponent (`1e+16`) from 1e16 on and below 1e-4.
fn write_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("NaN");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
        let formatted = format!("{f:e}"); // shortest digits, like "1.5e20" or "1e-5"
        let (mantissa, exponent) = formatted.split_once('e').expect("has an exponent");
        let exponent: i32 = exponent.parse().expect("numeric exponent");
        let sign = if exponent < 0 { '-' } else { '+' };
        let _ = write!(out, "{mantissa}e{sign}{:02}", exponent.abs());
    } else {
        let formatted = format!("{f}");
        out.push_str(&formatted);
        if !formatted.contains('.') {
            out.push_str(".0");
        }
    }
}

/// Python's `repr()` of the same data as dicts and lists: how Kopf's log lines show bodies.
pub fn to_python_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, value);
    out
}

fn write_repr(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Value::Number(n) => match n.as_f64().filter(|_| n.is_f64()) {
            Some(f) if f.is_finite() => write_float(out, f),
            Some(f) if f.is_nan() => out.push_str("nan"),
            Some(f) => out.push_str(if f > 0.0 { "inf" } else { "-inf" }),
            None => {
                let _ = write!(out, "{n}");
            }
        },
        Value::String(s) => write_repr_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, item);
            }
            out.push(']');
        }
        Value::Object(fields) => {
            out.push('{');
            for (i, (key, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr_string(out, key);
                out.push_str(": ");
                write_repr(out, item);
            }
            out.push('}');
        }
    }
}

fn write_repr_string(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_python_repr() {
        let value = json!({"a": [1, 2.0, true, null], "b": "it's", "c": "q'\"", "d": "x\ny"});
        assert_eq!(
            to_python_repr(&value),
            r#"{'a': [1, 2.0, True, None], 'b': "it's", 'c': 'q\'"', 'd': 'x\ny'}"#
        );
    }

    #[test]
    fn matches_python_json_dumps() {
        // Expected strings as produced by CPython 3.11's json.dumps(..., separators=(',', ':')).
        let value = json!({"b": [1, 2.5, true, null], "a": "x\"y\\z\n", "ü": "日本"});
        assert_eq!(
            to_python_json(&value),
            r#"{"b":[1,2.5,true,null],"a":"x\"y\\z\n","\u00fc":"\u65e5\u672c"}"#
        );
        assert_eq!(
            to_python_json(&json!("😀\u{7f}")),
            r#""\ud83d\ude00\u007f""#
        );
        assert_eq!(to_python_json(&json!(1.0)), "1.0");
        assert_eq!(to_python_json(&json!(1e16)), "1e+16");
        assert_eq!(to_python_json(&json!(1.5e-5)), "1.5e-05");
        assert_eq!(to_python_json(&json!(0.0001)), "0.0001");
        assert_eq!(to_python_json(&json!(123456789.125)), "123456789.125");
        assert_eq!(to_python_json(&json!(-3)), "-3");
    }
}
