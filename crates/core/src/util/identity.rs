//! Objects' identities as the engine keeps them for every object it knows (its memory of
//! objects at rest, the indices' contributors): a uid made by the API server is a UUID, kept
//! in 16 bytes inline rather than as a 36-character string in an allocation of its own.
//! Thousands of small long-lived allocations scattered among the events' short-lived ones
//! are what kept freed memory from going back to the system.

use std::fmt;
use std::sync::Arc;

/// An object's key, compactly: a uid as 16 bytes, anything else as its text.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum ObjectId {
    /// A uid in the canonical UUID form (lowercase, hyphenated), as its 128 bits.
    Uuid([u64; 2]),
    /// Any other key, as given (a uid of another form; namespace/name without a uid).
    Other(Arc<str>),
}

/// Where the hyphens of a canonical UUID are.
const HYPHENS: [usize; 4] = [8, 13, 18, 23];

impl ObjectId {
    /// The key's compact form.
    pub fn new(key: &str) -> Self {
        match parse_uuid(key) {
            Some(bits) => ObjectId::Uuid(bits),
            None => ObjectId::Other(Arc::from(key)),
        }
    }
}

/// The bits of a canonical UUID; `None` for anything that would not print back the same.
fn parse_uuid(text: &str) -> Option<[u64; 2]> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 {
        return None;
    }
    let mut bits: u128 = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        if HYPHENS.contains(&i) {
            if byte != b'-' {
                return None;
            }
            continue;
        }
        let digit = match byte {
            b'0'..=b'9' => byte - b'0',
            b'a'..=b'f' => byte - b'a' + 10,
            _ => return None, // uppercase too: it would come back lowercase
        };
        bits = (bits << 4) | u128::from(digit);
    }
    Some([(bits >> 64) as u64, bits as u64])
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectId::Other(text) => f.write_str(text),
            ObjectId::Uuid([high, low]) => {
                let hex = format!("{high:016x}{low:016x}");
                let (a, rest) = hex.split_at(8);
                let (b, rest) = rest.split_at(4);
                let (c, rest) = rest.split_at(4);
                let (d, e) = rest.split_at(4);
                write!(f, "{a}-{b}-{c}-{d}-{e}")
            }
        }
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl From<&str> for ObjectId {
    fn from(key: &str) -> Self {
        ObjectId::new(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_kept_as_bits_and_print_back_the_same() {
        let uid = "0e5fd5e9-2a00-4902-a7e0-41d7d3ed65da";
        let id = ObjectId::new(uid);
        assert!(matches!(id, ObjectId::Uuid(_)));
        assert_eq!(id.to_string(), uid);
        assert_eq!(id, ObjectId::new(uid));
        assert_ne!(id, ObjectId::new("0e5fd5e9-2a00-4902-a7e0-41d7d3ed65db"));
    }

    #[test]
    fn other_keys_are_kept_as_they_are() {
        for key in [
            "default/name",
            "uid-a",
            "0E5FD5E9-2A00-4902-A7E0-41D7D3ED65DA",
            "0e5fd5e9+2a00-4902-a7e0-41d7d3ed65da",
            "0e5fd5e9-2a00-4902-a7e0-41d7d3ed65dg",
            "",
        ] {
            let id = ObjectId::new(key);
            assert!(matches!(id, ObjectId::Other(_)), "{key}");
            assert_eq!(id.to_string(), key);
        }
    }

    #[test]
    fn an_identity_is_small() {
        assert_eq!(std::mem::size_of::<ObjectId>(), 24);
    }
}
