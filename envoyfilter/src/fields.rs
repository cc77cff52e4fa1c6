//! Field access on dynamic messages, as the patch levels share it.

use prost_reflect::{DynamicMessage, Value};

/// A string field ("" when unset).
pub(crate) fn str_field(m: &DynamicMessage, name: &str) -> String {
    m.get_field_by_name(name).and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// A set message field.
pub(crate) fn msg_field(m: &DynamicMessage, name: &str) -> Option<DynamicMessage> {
    if !m.has_field_by_name(name) {
        return None;
    }
    match m.get_field_by_name(name)?.into_owned() {
        Value::Message(x) => Some(x),
        _ => None,
    }
}

/// A repeated message field's messages.
pub(crate) fn list_field(m: &DynamicMessage, name: &str) -> Vec<DynamicMessage> {
    match m.get_field_by_name(name).map(|v| v.into_owned()) {
        Some(Value::List(items)) => items
            .into_iter()
            .filter_map(|v| match v {
                Value::Message(x) => Some(x),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Sets a repeated message field (cleared when empty, as an unset list).
pub(crate) fn set_list(m: &mut DynamicMessage, name: &str, items: Vec<DynamicMessage>) {
    if items.is_empty() {
        m.clear_field_by_name(name);
    } else {
        m.set_field_by_name(name, Value::List(items.into_iter().map(Value::Message).collect()));
    }
}
