//! Entity tags for the `if-match` vendor profile
//! (`services/rack-sim/src/vendor.rs`): a strong ETag that changes whenever
//! the resource's representation does.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

/// The ETag of a resource's body: a hash of its JSON text, quoted.
pub(crate) fn of(body: &Value) -> String {
    let mut hasher = DefaultHasher::new();
    body.to_string().hash(&mut hasher);
    format!("\"{:016x}\"", hasher.finish())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_tag_follows_the_representation() {
        let on = json!({"PowerState": "On"});
        assert_eq!(super::of(&on), super::of(&on.clone()));
        assert_ne!(super::of(&on), super::of(&json!({"PowerState": "Off"})));
        assert!(super::of(&on).starts_with('"') && super::of(&on).ends_with('"'));
    }
}
