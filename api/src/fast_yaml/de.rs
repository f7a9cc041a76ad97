//! Decoding straight from a [`Node`]: every method answers as `&serde_json::Value`'s
//! deserializer does for the same document, or fails. A failure is never shown to
//! anybody: the caller then decodes through a `Value`, which words the error. So this
//! may be stricter than `Value` (it is, for enums held in maps and for 128-bit numbers),
//! never more lenient, and a success must give the very same object.

use serde::de::value::{BorrowedStrDeserializer, Error};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use super::Node;

fn refuse<T>() -> Result<T, Error> {
    Err(de::Error::custom("not decoded by the fast path"))
}

impl<'de> Node<'de> {
    fn visit_number<V: Visitor<'de>>(n: i64, visitor: V) -> Result<V::Value, Error> {
        // `serde_json::Number::from(i64)`: non-negative numbers are unsigned.
        match u64::try_from(n) {
            Ok(u) => visitor.visit_u64(u),
            Err(_) => visitor.visit_i64(n),
        }
    }
}

fn visit_seq<'de, V: Visitor<'de>>(items: &'de [Node<'de>], visitor: V) -> Result<V::Value, Error> {
    let mut access = Items { iter: items.iter() };
    let value = visitor.visit_seq(&mut access)?;
    if access.iter.len() == 0 { Ok(value) } else { refuse() }
}

fn visit_map<'de, V: Visitor<'de>>(
    entries: &'de [(std::borrow::Cow<'de, str>, Node<'de>)],
    visitor: V,
) -> Result<V::Value, Error> {
    let mut access = Entries { iter: entries.iter(), value: None };
    let value = visitor.visit_map(&mut access)?;
    if access.iter.len() == 0 { Ok(value) } else { refuse() }
}

struct Items<'de> {
    iter: std::slice::Iter<'de, Node<'de>>,
}

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        self.iter.next().map(|n| seed.deserialize(n)).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

struct Entries<'de> {
    iter: std::slice::Iter<'de, (std::borrow::Cow<'de, str>, Node<'de>)>,
    value: Option<&'de Node<'de>>,
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.iter.next() else { return Ok(None) };
        self.value = Some(value);
        let key: BorrowedStrDeserializer<'de, Error> = BorrowedStrDeserializer::new(key);
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(value),
            None => refuse(),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

macro_rules! number {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self {
                Node::Int(n) => Node::visit_number(*n, visitor),
                _ => refuse(),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for &'de Node<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Null => visitor.visit_unit(),
            Node::Bool(b) => visitor.visit_bool(*b),
            Node::Int(n) => Node::visit_number(*n, visitor),
            Node::Str(s) => visitor.visit_borrowed_str(s),
            Node::Seq(items) => visit_seq(items, visitor),
            Node::Map(entries) => visit_map(entries, visitor),
        }
    }

    number!(
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_f32 deserialize_f64
    );

    fn deserialize_i128<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Error> {
        refuse()
    }

    fn deserialize_u128<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Error> {
        refuse()
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            // A unit variant, as `Value` reads a string.
            Node::Str(s) => {
                let variant: BorrowedStrDeserializer<'de, Error> = BorrowedStrDeserializer::new(s);
                visitor.visit_enum(variant)
            }
            _ => refuse(),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Bool(b) => visitor.visit_bool(*b),
            _ => refuse(),
        }
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Str(s) => visitor.visit_borrowed_str(s),
            _ => refuse(),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Str(s) => visitor.visit_borrowed_str(s),
            Node::Seq(items) => visit_seq(items, visitor),
            _ => refuse(),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Null => visitor.visit_unit(),
            _ => refuse(),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Seq(items) => visit_seq(items, visitor),
            _ => refuse(),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Map(entries) => visit_map(entries, visitor),
            _ => refuse(),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            Node::Seq(items) => visit_seq(items, visitor),
            Node::Map(entries) => visit_map(entries, visitor),
            _ => refuse(),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}
