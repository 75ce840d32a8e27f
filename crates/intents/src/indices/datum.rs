//! The keys and values of indices, kept in the core: Python's plain values (numbers, strings,
//! tuples, lists, dicts, sets) as they are, an object's body or its parts as their content
//! (marked, to be given back as the same kind of view), and any other object as an opaque
//! reference that the Python side keeps alive until the core lets it go.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A value of Python, as an index holds it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Datum {
    /// `None`.
    None,
    /// A `bool`.
    Bool(bool),
    /// An `int` that fits 64 bits.
    Int(i64),
    /// A `float`.
    Float(Float),
    /// A `str`, shared with the equal ones.
    Str(Arc<str>),
    /// `bytes`.
    Bytes(Arc<[u8]>),
    /// A `tuple`.
    Tuple(Arc<[Datum]>),
    /// A `list`.
    List(Arc<[Datum]>),
    /// A `dict`, in its order.
    Dict(Arc<[(Datum, Datum)]>),
    /// A `set`.
    Set(Arc<[Datum]>),
    /// A `frozenset`.
    FrozenSet(Arc<[Datum]>),
    /// A mapping that Python gives as a view of the object (`kopf.Body`, `kopf.Spec`, ...):
    /// its class's name and its content.
    View(Arc<str>, Arc<Datum>),
    /// Any other object: kept by the Python side under this reference.
    Opaque(Arc<Opaque>),
}

/// A float that can be a key: equal and hashed by its bits (as a key, NaN is only itself).
#[derive(Clone, Copy)]
pub struct Float(pub f64);

impl PartialEq for Float {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits() || self.0 == other.0 // 0.0 == -0.0, as in Python
    }
}

impl Eq for Float {}

impl Hash for Float {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Equal values hash alike: -0.0 as 0.0.
        let value = if self.0 == 0.0 { 0.0f64 } else { self.0 };
        value.to_bits().hash(state);
    }
}

/// A Python object that the core cannot hold itself: its number in the Python side's table,
/// released there when the last reference here is dropped. The Python side gives equal
/// hashable objects the same number (by Python's own `hash` and `==`), so numbers compare.
pub struct Opaque {
    /// Its number in the Python side's table.
    pub id: u64,
    release: Box<dyn Fn(u64) + Send + Sync>,
}

impl Opaque {
    /// The object of this number; `release` tells the Python side when it is no longer held.
    pub fn new(id: u64, release: Box<dyn Fn(u64) + Send + Sync>) -> Self {
        Self { id, release }
    }
}

impl Drop for Opaque {
    fn drop(&mut self) {
        (self.release)(self.id);
    }
}

impl PartialEq for Opaque {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Opaque {}

impl Hash for Opaque {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl fmt::Debug for Datum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Datum::None => f.write_str("None"),
            Datum::Bool(b) => write!(f, "{}", if *b { "True" } else { "False" }),
            Datum::Int(i) => write!(f, "{i}"),
            Datum::Float(x) => write!(f, "{}", x.0),
            Datum::Str(s) => write!(f, "{s:?}"),
            Datum::Bytes(b) => write!(f, "b{b:?}"),
            Datum::Tuple(items) => f.debug_tuple("").field(items).finish(),
            Datum::List(items) => f.debug_list().entries(items.iter()).finish(),
            Datum::Dict(items) => f
                .debug_map()
                .entries(items.iter().map(|(k, v)| (k, v)))
                .finish(),
            Datum::Set(items) | Datum::FrozenSet(items) => {
                f.debug_set().entries(items.iter()).finish()
            }
            Datum::View(kind, content) => write!(f, "{kind}({content:?})"),
            Datum::Opaque(opaque) => write!(f, "<object #{}>", opaque.id),
        }
    }
}

/// Strings repeat a lot across objects (namespaces, label values): one copy of each.
#[derive(Default)]
pub struct Strings {
    known: std::sync::Mutex<Known>,
}

#[derive(Default)]
struct Known {
    texts: std::collections::HashSet<Arc<str>>,
    /// When the table is this big, the strings that nothing uses anymore are forgotten:
    /// amortised, as a vector grows (twice what is left, at least `MIN_SWEEP`).
    sweep_at: usize,
}

const MIN_SWEEP: usize = 1024;

impl Strings {
    /// The shared copy of this text.
    pub fn intern(&self, text: &str) -> Arc<str> {
        let mut known = self.known.lock().expect("not poisoned");
        if let Some(found) = known.texts.get(text) {
            return found.clone();
        }
        if known.texts.len() >= known.sweep_at.max(MIN_SWEEP) {
            known.texts.retain(|text| Arc::strong_count(text) > 1);
            known.sweep_at = 2 * known.texts.len();
        }
        let text: Arc<str> = Arc::from(text);
        known.texts.insert(text.clone());
        text
    }

    /// How many texts are shared.
    pub fn len(&self) -> usize {
        self.known.lock().expect("not poisoned").texts.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_are_one_copy() {
        let strings = Strings::default();
        let (a, b) = (strings.intern("default"), strings.intern("default"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(strings.len(), 1);
    }

    #[test]
    fn unused_strings_are_forgotten_as_the_table_grows() {
        let strings = Strings::default();
        let kept: Vec<_> = (0..10)
            .map(|i| strings.intern(&format!("kept-{i}")))
            .collect();
        for i in 0..10 * MIN_SWEEP {
            strings.intern(&format!("gone-{i}")); // dropped at once: nothing uses it
        }
        assert!(strings.len() <= MIN_SWEEP + kept.len(), "{}", strings.len());
        let again = strings.intern("kept-3");
        assert!(Arc::ptr_eq(&again, &kept[3]), "strings in use are kept");
    }
}
