//! Canonical JSON: one spelling per value, so that a hash of a record does
//! not depend on how its maps were ordered by whoever wrote it (Postgres'
//! `jsonb`, a file read back, `serde_json` with `preserve_order`). Object
//! keys are sorted by their bytes, at every depth; no whitespace; strings
//! and numbers as `serde_json` writes them.

use serde_json::Value;

/// `value` in canonical form.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn keys_are_sorted_at_every_depth_and_order_of_writing_does_not_matter() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b": 1, "a": {"y": [2, {"d": null, "c": "x"}], "x": true}}"#)
                .unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a": {"x": true, "y": [2, {"c": "x", "d": null}]}, "b": 1}"#)
                .unwrap();
        assert_eq!(super::to_string(&a), super::to_string(&b));
        assert_eq!(
            super::to_string(&a),
            r#"{"a":{"x":true,"y":[2,{"c":"x","d":null}]},"b":1}"#
        );
        // Arrays keep their order: it is part of the value.
        assert_ne!(
            super::to_string(&json!([1, 2])),
            super::to_string(&json!([2, 1]))
        );
        assert_eq!(super::to_string(&json!("a\"\n")), r#""a\"\n""#);
    }
}
