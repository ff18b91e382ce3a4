//! Serde visitors that measure a module's output without building it: the values of a
//! document, and the items of a ResourceList.

use std::cell::Cell;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The error a count over its limit stops the parse with.
pub(super) const OVER: &str = "enoki: too many values";
/// Counts every value (scalars, lists and maps) a parse visits, up to a limit.
#[derive(Clone, Copy)]
pub(super) struct Counter<'a>(pub(super) &'a Cell<usize>, pub(super) usize);
impl Counter<'_> {
    fn one<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.set(self.0.get() + 1);
        if self.0.get() > self.1 {
            return Err(E::custom(OVER));
        }
        Ok(())
    }
}
impl<'de> DeserializeSeed<'de> for Counter<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}
impl<'de> Visitor<'de> for Counter<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.one()
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.one()
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.one()
    }
    fn visit_i128<E: serde::de::Error>(self, _: i128) -> Result<(), E> {
        self.one()
    }
    fn visit_u128<E: serde::de::Error>(self, _: u128) -> Result<(), E> {
        self.one()
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.one()
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.one()
    }
    fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<(), E> {
        self.one()
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.one()
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.one()
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.one()?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.one()?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }
}

/// The length of a list (0 for any other value), its elements not built.
struct Count(usize);
impl<'de> serde::Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
            // Not a list: no items here (the full parse says what is wrong), and the count
            // goes on to any later `items` key.
            fn visit_unit<E>(self) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_none<E>(self) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_str<E>(self, _: &str) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Count, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Count(0))
            }
        }
        d.deserialize_any(V)
    }
}
/// The items of a ResourceList: every `items` key counts (a JSON object may repeat one;
/// the full parse keeps the last).
pub(super) struct Shape(pub(super) usize);
impl<'de> serde::Deserialize<'de> for Shape {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Shape;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a ResourceList")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Shape, A::Error> {
                let mut n = 0usize;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "items" {
                        n = n.saturating_add(map.next_value::<Count>()?.0);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Shape(n))
            }
        }
        d.deserialize_map(V)
    }
}
