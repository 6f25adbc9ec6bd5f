//! Reads an `OrdMap` from untrusted bytes (a snapshot).
//!
//! imbl's own `Deserialize` preallocates whatever length the input claims,
//! so a corrupt snapshot claiming 2^62 entries aborts the process on
//! allocation failure. Here entries are inserted one at a time as they are
//! read, so a false length just runs out of input and is a decode error.
//! Keys must arrive strictly increasing, as `encode` writes them: an
//! unsorted or repeated key is refused, so the only accepted encoding of an
//! image is its canonical one.

use std::fmt;
use std::marker::PhantomData;

use imbl::OrdMap;
use serde::de::{Deserialize, Deserializer, Error, MapAccess, Visitor};

pub(super) fn deserialize<'de, D, K, V>(de: D) -> Result<OrdMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord + Clone,
    V: Deserialize<'de> + Clone,
{
    de.deserialize_map(SortedMapVisitor(PhantomData))
}

struct SortedMapVisitor<K, V>(PhantomData<fn() -> (K, V)>);

impl<'de, K, V> Visitor<'de> for SortedMapVisitor<K, V>
where
    K: Deserialize<'de> + Ord + Clone,
    V: Deserialize<'de> + Clone,
{
    type Value = OrdMap<K, V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map with strictly increasing keys")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Self::Value, A::Error> {
        // No `size_hint` preallocation: the hint is the untrusted length.
        let mut map = OrdMap::new();
        while let Some((k, v)) = entries.next_entry::<K, V>()? {
            if map.get_max().is_some_and(|(max, _)| *max >= k) {
                return Err(A::Error::custom("map keys not strictly increasing"));
            }
            map.insert(k, v);
        }
        Ok(map)
    }
}
