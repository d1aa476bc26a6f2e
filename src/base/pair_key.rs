//! Maps keyed by two owned strings (organisation and app, say), looked up with two borrowed
//! ones.
//!
//! Why: `map.get(&(org_id.to_string(), app_id.to_string()))` allocates two strings for every
//! lookup, and some of these lookups run on every MCP call. A `(String, String)` key borrows as
//! `dyn Pair`, which `(&str, &str)` also is; both hash and compare as their two strings in
//! order (exactly as the owned tuple hashes), so `map.get(pair(org_id, app_id))` finds the
//! owned key without building one.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// Two strings, in order.
pub trait Pair {
    fn pair(&self) -> (&str, &str);
}

impl Pair for (String, String) {
    fn pair(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl Pair for (&str, &str) {
    fn pair(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> Borrow<dyn Pair + 'a> for (String, String) {
    fn borrow(&self) -> &(dyn Pair + 'a) {
        self
    }
}

/// As `(String, String)` hashes: the first string, then the second.
impl Hash for dyn Pair + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.pair().hash(state)
    }
}

impl PartialEq for dyn Pair + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.pair() == other.pair()
    }
}

impl Eq for dyn Pair + '_ {}

/// The borrowed key `(a, b)` of a map keyed by `(String, String)`.
pub(crate) fn pair<'a>(key: &'a (&'a str, &'a str)) -> &'a (dyn Pair + 'a) {
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use dashmap::DashMap;
    use std::collections::HashMap;

    #[test]
    fn a_borrowed_pair_finds_the_owned_key_and_only_it() {
        let map: DashMap<(String, String), u32> = DashMap::new();
        map.insert(("org_1".into(), "time".into()), 1);
        map.insert(("org_1".into(), "everything".into()), 2);
        map.insert(("org_1time".into(), String::new()), 3);
        assert_eq!(map.get(pair(&("org_1", "time"))).map(|v| *v), Some(1));
        assert_eq!(map.get(pair(&("org_1", "everything"))).map(|v| *v), Some(2));
        // The boundary between the two strings counts: "org_1" + "time" is not "org_1time" + "".
        assert_eq!(map.get(pair(&("org_1time", ""))).map(|v| *v), Some(3));
        assert!(map.get(pair(&("org_2", "time"))).is_none());
        assert!(map.get(pair(&("time", "org_1"))).is_none());

        let mut plain: HashMap<(String, String), u32> = HashMap::new();
        plain.insert(("a".into(), "b".into()), 7);
        assert_eq!(plain.remove(pair(&("a", "b"))), Some(7));
        assert!(plain.is_empty());
    }
}
