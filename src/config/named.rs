//! [`Named`]: a map from names to values, fixed once loaded, for the
//! environments of a tool and the endpoints of an environment.
//!
//! Most of these maps hold one to a few entries. A `BTreeMap` allocates a
//! whole node of 11 slots for its first entry (about 2.4 KB per
//! environment with the size of an [`super::Endpoint`]), which for 1,000
//! tools of 3 environments was most of the config's memory; a sorted boxed
//! slice holds exactly its entries and is searched by bisection.

use std::borrow::Borrow;

/// Values by name, sorted by name, exactly as many slots as entries.
#[derive(Debug)]
pub struct Named<V>(Box<[(String, V)]>);

impl<V> Named<V> {
    /// The value named `name`.
    pub fn get(&self, name: &str) -> Option<&V> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// Whether an entry is named `name`.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The values in name order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }
}

/// Sorted by name; of entries with the same name the last one stays, as
/// `BTreeMap::from_iter` keeps it.
impl<V> FromIterator<(String, V)> for Named<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        let mut v: Vec<(String, V)> = iter.into_iter().collect();
        // Stable: equal names keep their order, and the last one of each
        // run is kept below.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, V)> = Vec::with_capacity(v.len());
        for entry in v {
            match out.last_mut() {
                Some(last) if last.0 == entry.0 => *last = entry,
                _ => out.push(entry),
            }
        }
        Named(out.into_boxed_slice())
    }
}

impl<V, Q: Borrow<str> + ?Sized> std::ops::Index<&Q> for Named<V> {
    type Output = V;

    /// The value named `name`; panics when there is none, as a map does.
    fn index(&self, name: &Q) -> &V {
        self.get(name.borrow()).expect("no entry of that name")
    }
}

impl<V> Default for Named<V> {
    fn default() -> Self {
        Named(Box::new([]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_by_name_in_order_and_keeps_the_last_of_a_name() {
        let m: Named<u32> = [("b", 1), ("a", 2), ("c", 3), ("b", 4)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(m.values().collect::<Vec<_>>(), [&2, &4, &3]);
        assert_eq!(m.get("b"), Some(&4));
        assert_eq!(m["c"], 3);
        assert_eq!(m.get("d"), None);
        assert!(m.contains_key("a") && !m.contains_key(""));
        assert_eq!(Named::<u32>::default().values().count(), 0);
    }
}
