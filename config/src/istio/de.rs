//! A serde `Deserializer` over a parsed [`Value`] that knows where it is in
//! the document. An error raised while reading a field (a field the type
//! does not have, a wrong type, an enum value that does not exist) is
//! tagged with the path of that field, so the caller can say
//! `spec.http[0].route[1].weight: invalid type: string "x", expected i32`
//! rather than only the message.
//!
//! Two departures from a plain value deserializer, both following how the
//! Kubernetes API server treats custom resources: a struct field whose
//! value is `null` counts as absent, and a map key written as a number
//! (`8080:`) or as a string (`"8080":`) reads as either.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Error as _, Unexpected, Visitor};
use serde_yaml_ng::{Mapping, Number, Value};

use super::field::FieldError;

/// Deserializes `value` (found at `path`), or gives `T::default()` when the
/// field is absent.
pub(crate) fn read_or_default<'de, T>(value: Option<&'de Value>, path: &str) -> Result<T, FieldError>
where
    T: Deserialize<'de> + Default,
{
    let Some(value) = value else {
        return Ok(T::default());
    };
    T::deserialize(PathDe { value, path: path.to_owned() })
        .map_err(|e| FieldError::new(e.path.unwrap_or_else(|| path.to_owned()), e.message))
}

/// A deserialization error, with the path of the field it is about once a
/// deserializer has claimed it (the innermost one does, first).
#[derive(Debug)]
pub(crate) struct DeError {
    path: Option<String>,
    message: String,
}

impl DeError {
    fn at(mut self, path: &str) -> Self {
        if self.path.is_none() {
            self.path = Some(path.to_owned());
        }
        self
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{path}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError { path: None, message: msg.to_string() }
    }
}

/// Looks through YAML tags (`!foo value`): the schema has no use for them.
fn untag(value: &Value) -> &Value {
    match value {
        Value::Tagged(tagged) => untag(&tagged.value),
        other => other,
    }
}

fn unexpected(value: &Value) -> Unexpected<'_> {
    match untag(value) {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Unexpected::Unsigned(u),
            (None, Some(i)) => Unexpected::Signed(i),
            (None, None) => Unexpected::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Sequence(_) => Unexpected::Seq,
        Value::Mapping(_) => Unexpected::Map,
        Value::Tagged(_) => Unexpected::Other("tagged value"),
    }
}

fn visit_number<'de, V: Visitor<'de>>(n: &Number, visitor: V) -> Result<V::Value, DeError> {
    match (n.as_u64(), n.as_i64()) {
        (Some(u), _) => visitor.visit_u64(u),
        (None, Some(i)) => visitor.visit_i64(i),
        (None, None) => visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN)),
    }
}

/// The path of a map entry: `parent.key` for a struct field, `parent[key]`
/// for an entry of a real map.
fn child_path(parent: &str, key: &Value, field: bool) -> String {
    let key = match untag(key) {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "~".to_owned(),
        _ => "?".to_owned(),
    };
    match (field, parent.is_empty()) {
        (true, true) => key,
        (true, false) => format!("{parent}.{key}"),
        (false, _) => format!("{parent}[{key}]"),
    }
}

/// Deserializes the value at `path`.
struct PathDe<'de> {
    value: &'de Value,
    path: String,
}

impl<'de> de::Deserializer<'de> for PathDe<'de> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match untag(self.value) {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => visit_number(n, visitor),
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Sequence(items) => visitor.visit_seq(SeqDe { items: items.iter(), index: 0, path: &self.path }),
            Value::Mapping(map) => visitor.visit_map(MapDe::new(map, &self.path, false)),
            Value::Tagged(_) => Err(DeError::custom("nested YAML tags are not supported")),
        };
        result.map_err(|e| e.at(&self.path))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if untag(self.value).is_null() { visitor.visit_none() } else { visitor.visit_some(self) }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match untag(self.value) {
            Value::Sequence(items) => visitor.visit_seq(SeqDe { items: items.iter(), index: 0, path: &self.path }),
            other => Err(DeError::invalid_type(unexpected(other), &visitor)),
        };
        result.map_err(|e| e.at(&self.path))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match untag(self.value) {
            Value::Mapping(map) => visitor.visit_map(MapDe::new(map, &self.path, false)),
            other => Err(DeError::invalid_type(unexpected(other), &visitor)),
        };
        result.map_err(|e| e.at(&self.path))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let result = match untag(self.value) {
            Value::Mapping(map) => visitor.visit_map(MapDe::new(map, &self.path, true)),
            other => Err(DeError::invalid_type(unexpected(other), &visitor)),
        };
        result.map_err(|e| e.at(&self.path))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        // Only unit variants exist in the schema: an enum is its name, a string.
        let result = match untag(self.value) {
            Value::String(s) => visitor.visit_enum(de::value::StrDeserializer::<DeError>::new(s)),
            other => Err(DeError::invalid_type(unexpected(other), &visitor)),
        };
        result.map_err(|e| e.at(&self.path))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct tuple tuple_struct identifier
    }
}

struct SeqDe<'p, 'de> {
    items: std::slice::Iter<'de, Value>,
    index: usize,
    path: &'p str,
}

impl<'de> de::SeqAccess<'de> for SeqDe<'_, 'de> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, DeError> {
        let Some(value) = self.items.next() else {
            return Ok(None);
        };
        let path = format!("{}[{}]", self.path, self.index);
        self.index += 1;
        seed.deserialize(PathDe { value, path }).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapDe<'p, 'de> {
    entries: std::vec::IntoIter<(&'de Value, &'de Value)>,
    pending: Option<(&'de Value, String)>,
    path: &'p str,
    /// The entries are a struct's fields (not a map's keys).
    fields: bool,
}

impl<'p, 'de> MapDe<'p, 'de> {
    fn new(map: &'de Mapping, path: &'p str, fields: bool) -> Self {
        let entries: Vec<(&'de Value, &'de Value)> =
            map.iter().filter(|(_, value)| !(fields && untag(value).is_null())).collect();
        MapDe { entries: entries.into_iter(), pending: None, path, fields }
    }
}

impl<'de> de::MapAccess<'de> for MapDe<'_, 'de> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, DeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        let path = child_path(self.path, key, self.fields);
        let key = seed.deserialize(KeyDe { value: untag(key), path: &path })?;
        self.pending = Some((value, path));
        Ok(Some(key))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        match self.pending.take() {
            Some((value, path)) => seed.deserialize(PathDe { value, path }),
            None => Err(DeError::custom("a map value was read before its key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// Deserializes a map key (or a struct field name); errors are reported at
/// the entry's path, so an unknown field names itself.
struct KeyDe<'p, 'de> {
    value: &'de Value,
    path: &'p str,
}

impl<'de> KeyDe<'_, 'de> {
    /// A number wanted: `"8080"` is read as 8080 too (JSON has only string keys).
    fn number<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let Value::String(s) = self.value else {
            return de::Deserializer::deserialize_any(self, visitor);
        };
        let result = if let Ok(u) = s.parse::<u64>() {
            visitor.visit_u64(u)
        } else if let Ok(i) = s.parse::<i64>() {
            visitor.visit_i64(i)
        } else {
            visitor.visit_borrowed_str(s)
        };
        result.map_err(|e: DeError| e.at(self.path))
    }

    /// A string wanted: a YAML number or boolean key is read as its text.
    fn text<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match self.value {
            Value::Number(n) => visitor.visit_string(n.to_string()),
            Value::Bool(b) => visitor.visit_string(b.to_string()),
            _ => return de::Deserializer::deserialize_any(self, visitor),
        };
        result.map_err(|e: DeError| e.at(self.path))
    }
}

impl<'de> de::Deserializer<'de> for KeyDe<'_, 'de> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match self.value {
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Number(n) => visit_number(n, visitor),
            Value::Bool(b) => visitor.visit_bool(*b),
            other => Err(DeError::invalid_type(unexpected(other), &"a string or a number as key")),
        };
        result.map_err(|e: DeError| e.at(self.path))
    }

    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.number(visitor)
    }

    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.number(visitor)
    }

    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.number(visitor)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.number(visitor)
    }

    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.number(visitor)
    }

    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.number(visitor)
    }

    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.number(visitor)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.number(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.text(visitor)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.text(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.text(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i128 u128 f32 f64 char bytes byte_buf option unit unit_struct newtype_struct seq
        tuple tuple_struct map struct enum ignored_any
    }
}
