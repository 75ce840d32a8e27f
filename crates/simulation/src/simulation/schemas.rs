//! What a CRD's structural schema (`openAPIV3Schema`) does to an object that is written, as
//! the API server does it: unknown fields are pruned (unless the schema preserves them), null
//! values of fields that are not `nullable` are dropped, defaults fill in absent fields, and
//! the types, `enum` and `required` are checked. Not checked: the formats, patterns, bounds
//! and CEL rules (`x-kubernetes-validations`); the docs page lists them.

use serde_json::{Map, Value};

/// Prune, default and check the object (its `apiVersion`, `kind` and `metadata` are the
/// server's, not the schema's): the reasons it is refused, in the server's words.
pub fn admit(schema: &Value, object: &mut Value) -> Result<(), String> {
    let mut errors = Vec::new();
    visit(schema, object, "", true, &mut errors);
    errors.sort(); // by the fields' paths, whatever the order of the object's keys
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

fn visit(schema: &Value, value: &mut Value, path: &str, root: bool, errors: &mut Vec<String>) {
    let int_or_string = schema["x-kubernetes-int-or-string"] == Value::Bool(true);
    let actual = type_of(value);
    let fits = match schema["type"].as_str() {
        _ if int_or_string => matches!(actual, "integer" | "string"),
        Some("number") => matches!(actual, "integer" | "number"),
        Some(expected) => actual == expected,
        None => true,
    };
    if !fits {
        let expected = match schema["type"].as_str() {
            _ if int_or_string => "integer or string",
            Some(expected) => expected,
            None => "",
        };
        errors.push(format!(
            "{path}: Invalid value: \"{actual}\": {path} in body must be of type {expected}: \"{actual}\""
        ));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
            errors.push(format!(
                "{path}: Unsupported value: {value}: supported values: {}",
                allowed.join(", ")
            ));
        }
    }
    match value {
        Value::Object(fields) => visit_fields(schema, fields, path, root, errors),
        Value::Array(items) => {
            if let Some(each) = schema.get("items") {
                let nullable = each["nullable"] == Value::Bool(true);
                for (index, item) in items.iter_mut().enumerate() {
                    if !(item.is_null() && nullable) {
                        visit(each, item, &format!("{path}[{index}]"), false, errors);
                    }
                }
            }
        }
        _ => {}
    }
}

fn visit_fields(
    schema: &Value,
    fields: &mut Map<String, Value>,
    path: &str,
    root: bool,
    errors: &mut Vec<String>,
) {
    let properties = schema["properties"].as_object();
    let additional = &schema["additionalProperties"];
    let preserved = schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true)
        || *additional == Value::Bool(true);
    let server_owned = |key: &str| root && matches!(key, "apiVersion" | "kind" | "metadata");
    let keys: Vec<String> = fields.keys().cloned().collect();
    for key in keys {
        if server_owned(&key) {
            continue;
        }
        let own = properties.and_then(|properties| properties.get(&key));
        let Some(field) = own.or(additional.is_object().then_some(additional)) else {
            if !preserved {
                fields.remove(&key); // pruned: the schema does not know it
            }
            continue;
        };
        if fields[&key].is_null() {
            if field["nullable"] != Value::Bool(true) {
                fields.remove(&key);
            }
            continue;
        }
        let inner = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        if let Some(value) = fields.get_mut(&key) {
            visit(field, value, &inner, false, errors);
        }
    }
    for (key, field) in properties.into_iter().flatten() {
        if !fields.contains_key(key) && !server_owned(key) {
            if let Some(default) = field.get("default") {
                fields.insert(key.clone(), default.clone());
            }
        }
    }
    for required in schema["required"].as_array().into_iter().flatten() {
        let Some(required) = required.as_str() else {
            continue;
        };
        if !fields.contains_key(required) {
            let at = if path.is_empty() {
                required.to_owned()
            } else {
                format!("{path}.{required}")
            };
            errors.push(format!("{at}: Required value"));
        }
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["who"], "properties": {
                "who": {"type": "string"},
                "times": {"type": "integer", "default": 1},
                "mood": {"type": "string", "enum": ["calm", "loud"]},
                "port": {"x-kubernetes-int-or-string": true},
                "tags": {"type": "array", "items": {"type": "string"}},
                "note": {"type": "string", "nullable": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            }},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
        }})
    }

    fn object(spec: Value, status: Value) -> Value {
        json!({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
               "metadata": {"name": "g1", "annotations": {"a": "b"}},
               "spec": spec, "status": status})
    }

    #[test]
    fn unknown_fields_are_pruned_and_defaults_filled_in_as_the_server_does() {
        let mut written = object(
            json!({"who": "Tess", "extra": 1, "note": null, "mood": null,
                   "labels": {"x": "y"}, "port": "http"}),
            json!({"phase": "Ready", "greet": {"message": "Hello"}}),
        );
        admit(&schema(), &mut written).unwrap();
        assert_eq!(
            written,
            object(
                json!({"who": "Tess", "times": 1, "note": null, "labels": {"x": "y"}, "port": "http"}),
                json!({"phase": "Ready"}),
            ),
            "a handler's result in a status that does not preserve unknown fields is dropped",
        );
    }

    #[test]
    fn wrong_types_missing_fields_and_other_values_are_refused_in_the_servers_words() {
        let refused = |spec: Value| {
            let mut written = object(spec, json!({}));
            admit(&schema(), &mut written).unwrap_err()
        };
        assert_eq!(
            refused(json!({"who": 5})),
            "spec.who: Invalid value: \"integer\": spec.who in body must be of type string: \"integer\""
        );
        assert_eq!(refused(json!({})), "spec.who: Required value");
        assert_eq!(
            refused(json!({"who": "Tess", "mood": "sad"})),
            "spec.mood: Unsupported value: \"sad\": supported values: \"calm\", \"loud\""
        );
        assert_eq!(
            refused(json!({"who": "Tess", "tags": ["a", 2], "times": 1.5, "port": true})),
            "[spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer or string: \"boolean\", \
             spec.tags[1]: Invalid value: \"integer\": spec.tags[1] in body must be of type string: \"integer\", \
             spec.times: Invalid value: \"number\": spec.times in body must be of type integer: \"number\"]"
        );
        let mut whole = object(json!({"who": "Tess", "times": 2.0}), json!({}));
        assert!(
            admit(&schema(), &mut whole).is_ok(),
            "2.0 is an integer in JSON"
        );
    }

    #[test]
    fn a_schema_that_preserves_unknown_fields_keeps_them() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
        let mut written = object(json!({"anything": {"at": ["all"]}}), json!({"kept": "no"}));
        admit(&schema, &mut written).unwrap();
        assert_eq!(written["spec"], json!({"anything": {"at": ["all"]}}));
        assert_eq!(written.get("status"), None, "not in the schema: pruned");
        assert_eq!(written["metadata"]["annotations"], json!({"a": "b"}));
    }
}
