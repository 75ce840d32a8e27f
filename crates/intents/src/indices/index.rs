//! One index: keys to the values of the objects that gave them (Kopf's `kopf.Index` of
//! `kopf.Store`s), and the keys each object gave, so that replacing or discarding an object's
//! contributions costs what that object has, not what the index has.

use crate::indices::datum::Datum;
use crate::util::identity::ObjectId;
use indexmap::IndexMap;
use region::apart;
use smallvec::SmallVec;
use std::collections::HashMap;

/// Which object a value came from (its uid; namespace/name for the rare object without one).
pub type ObjectKey = ObjectId;

/// The values under one key, by the object that gave each, in the order they came. Most
/// keys have one object or a few (a pod's name): a list for them, inline in the index for
/// one object; a map once there are many (a label's value shared by thousands).
#[derive(Default)]
pub struct Store(Values);

enum Values {
    Few(SmallVec<[(ObjectKey, Datum); 1]>),
    Many(Box<IndexMap<ObjectKey, Datum>>),
}

impl Default for Values {
    fn default() -> Self {
        Values::Few(SmallVec::new())
    }
}

/// The keys an object gave: inline for the usual one or two.
type Given = SmallVec<[Datum; 2]>;

/// Up to this many objects, a store is a list: searching it is as quick as hashing.
const FEW: usize = 8;

impl Store {
    /// How many values the store has.
    pub fn len(&self) -> usize {
        match &self.0 {
            Values::Few(list) => list.len(),
            Values::Many(map) => map.len(),
        }
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values, in the order their objects came.
    pub fn values(&self) -> Box<dyn Iterator<Item = &Datum> + '_> {
        match &self.0 {
            Values::Few(list) => Box::new(list.iter().map(|(_, value)| value)),
            Values::Many(map) => Box::new(map.values()),
        }
    }

    /// The object's value is now this one (replaced in place, or added at the end).
    fn set(&mut self, object: &ObjectKey, value: Datum) {
        match &mut self.0 {
            Values::Few(list) => {
                if let Some((_, existing)) = list.iter_mut().find(|(o, _)| o == object) {
                    *existing = value;
                } else if list.len() < FEW {
                    list.reserve_exact(1);
                    list.push((object.clone(), value));
                } else {
                    let mut map: IndexMap<_, _> = list.drain(..).collect();
                    map.insert(object.clone(), value);
                    self.0 = Values::Many(Box::new(map));
                }
            }
            Values::Many(map) => {
                map.insert(object.clone(), value);
            }
        }
    }

    fn remove(&mut self, object: &ObjectKey) {
        match &mut self.0 {
            Values::Few(list) => list.retain(|(o, _)| o != object),
            Values::Many(map) => {
                map.shift_remove(object);
            }
        }
    }
}

/// One index (`@kopf.index`): its keys, each with the values of the objects that gave it.
#[derive(Default)]
pub struct Index {
    entries: IndexMap<Datum, Store>,
    reverse: HashMap<ObjectKey, Given>,
}

impl Index {
    /// The object's contributions are now these (key, value) pairs: new ones added, changed
    /// ones replaced in place, keys it no longer gives dropped (and stores left empty).
    pub fn replace(&mut self, object: &ObjectKey, pairs: Vec<(Datum, Datum)>) {
        // What the stores and the reverse map keep of the object, for as long as it lives.
        apart(|| self.replace_now(object, pairs));
    }

    fn replace_now(&mut self, object: &ObjectKey, pairs: Vec<(Datum, Datum)>) {
        let before = self.reverse.remove(object).unwrap_or_default();
        let mut keys = Given::with_capacity(pairs.len());
        for (key, value) in pairs {
            let entry = self.entries.entry(key);
            // The key as the index has it already: one copy for all the objects giving it.
            let key = entry.key().clone();
            entry.or_default().set(object, value);
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        keys.shrink_to_fit();
        for key in before.iter().filter(|key| !keys.contains(key)) {
            self.remove_value(key, object);
        }
        if !keys.is_empty() {
            self.reverse.insert(object.clone(), keys);
        }
    }

    /// The object contributes nothing anymore.
    pub fn discard(&mut self, object: &ObjectKey) {
        for key in self.reverse.remove(object).unwrap_or_default() {
            self.remove_value(&key, object);
        }
    }

    fn remove_value(&mut self, key: &Datum, object: &ObjectKey) {
        if let Some(store) = self.entries.get_mut(key) {
            store.remove(object);
            if store.is_empty() {
                self.entries.shift_remove(key);
            }
        }
    }

    /// The objects that contribute to this index.
    pub fn objects(&self) -> impl Iterator<Item = &ObjectKey> {
        self.reverse.keys()
    }

    /// How many keys it has.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Its keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &Datum> {
        self.entries.keys()
    }

    /// The keys with their values, in the keys' order.
    pub fn entries(&self) -> impl Iterator<Item = (&Datum, &Store)> {
        self.entries.iter()
    }

    /// The values under a key (none if the key is not in the index).
    pub fn store(&self, key: &Datum) -> Option<&Store> {
        self.entries.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Datum {
        Datum::Str(text.into())
    }

    fn content(index: &Index) -> Vec<(Datum, Vec<Datum>)> {
        (index.keys())
            .map(|k| {
                (
                    k.clone(),
                    index.store(k).unwrap().values().cloned().collect(),
                )
            })
            .collect()
    }

    #[test]
    fn objects_contribute_replace_and_leave() {
        let mut index = Index::default();
        let (a, b): (ObjectKey, ObjectKey) = ("uid-a".into(), "uid-b".into());
        index.replace(&a, vec![(s("k1"), s("A")), (s("k2"), s("A2"))]);
        index.replace(&b, vec![(s("k1"), s("B"))]);
        assert_eq!(
            content(&index),
            [(s("k1"), vec![s("A"), s("B")]), (s("k2"), vec![s("A2")])]
        );

        // a changes its value under k1 (in place) and stops giving k2 (the store goes).
        index.replace(&a, vec![(s("k1"), s("A'"))]);
        assert_eq!(content(&index), [(s("k1"), vec![s("A'"), s("B")])]);

        index.discard(&a);
        assert_eq!(content(&index), [(s("k1"), vec![s("B")])]);
        index.discard(&b);
        assert!(index.is_empty() && index.objects().next().is_none());
    }

    #[test]
    fn a_store_of_many_keeps_the_objects_order() {
        let mut index = Index::default();
        let objects: Vec<ObjectKey> = (0..2 * FEW)
            .map(|i| ObjectId::new(&format!("uid-{i}")))
            .collect();
        for (i, object) in objects.iter().enumerate() {
            index.replace(object, vec![(s("k"), Datum::Int(i as i64))]);
        }
        index.replace(&objects[4], vec![(s("k"), s("changed"))]);
        for object in objects.iter().skip(1).step_by(2) {
            index.discard(object);
        }
        let expected: Vec<Datum> = (0..2 * FEW)
            .step_by(2)
            .map(|i| match i {
                _ if i == 4 => s("changed"),
                _ => Datum::Int(i as i64),
            })
            .collect();
        assert_eq!(content(&index), [(s("k"), expected)]);
    }

    #[test]
    fn one_object_one_value_per_key() {
        let mut index = Index::default();
        let a: ObjectKey = "uid-a".into();
        index.replace(&a, vec![(Datum::None, s("x")), (Datum::None, s("y"))]);
        assert_eq!(
            content(&index),
            [(Datum::None, vec![s("y")])],
            "the last one wins, as in a dict"
        );
    }
}
