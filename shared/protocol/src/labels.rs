//! Rack labels: free-form `key=value` pairs an operator sets (`site`, `row`,
//! `pod`, …) and targets racks by (`--label row=B`).

use std::collections::BTreeMap;

/// A rack's labels, by key.
pub type Labels = BTreeMap<String, String>;

/// The longest label key.
pub const MAX_KEY_LEN: usize = 63;
/// The longest label value.
pub const MAX_VALUE_LEN: usize = 128;
/// The most labels on one rack.
pub const MAX_LABELS: usize = 32;

/// What is wrong with a label key, if anything: 1 to [`MAX_KEY_LEN`]
/// letters, digits, `-`, `_`, `.` or `/`, starting with a letter or digit.
pub fn key_problem(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("a label key must not be empty".to_owned());
    }
    if key.chars().count() > MAX_KEY_LEN {
        return Some(format!(
            "label key {key:?} is longer than {MAX_KEY_LEN} characters"
        ));
    }
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/');
    if !key.starts_with(|c: char| c.is_ascii_alphanumeric()) || !key.chars().all(valid) {
        return Some(format!(
            "label key {key:?} must start with a letter or digit and hold only letters, digits, '-', '_', '.' and '/'"
        ));
    }
    None
}

/// What is wrong with a label value, if anything: 1 to [`MAX_VALUE_LEN`]
/// characters, no control characters.
pub fn value_problem(key: &str, value: &str) -> Option<String> {
    if value.trim().is_empty() {
        return Some(format!("label {key:?} needs a value"));
    }
    if value.chars().count() > MAX_VALUE_LEN {
        return Some(format!(
            "label {key:?}: the value is longer than {MAX_VALUE_LEN} characters"
        ));
    }
    if value.chars().any(char::is_control) {
        return Some(format!(
            "label {key:?}: the value must not contain control characters"
        ));
    }
    None
}

/// Every problem of `labels`, each prefixed with `field`.
pub fn problems(field: &str, labels: &Labels) -> Vec<String> {
    let mut problems: Vec<String> = labels
        .iter()
        .filter_map(|(k, v)| key_problem(k).or_else(|| value_problem(k, v)))
        .map(|p| format!("{field}: {p}"))
        .collect();
    if labels.len() > MAX_LABELS {
        problems.push(format!(
            "{field}: at most {MAX_LABELS} labels, got {}",
            labels.len()
        ));
    }
    problems
}

/// Parses `key=value` as typed on a command line.
pub fn parse_pair(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: a label is key=value"))?;
    let (key, value) = (key.trim(), value.trim());
    if let Some(p) = key_problem(key).or_else(|| value_problem(key, value)) {
        return Err(p);
    }
    Ok((key.to_owned(), value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_and_bad_ones_are_named() {
        assert_eq!(parse_pair("row=B"), Ok(("row".into(), "B".into())));
        assert_eq!(
            parse_pair("site = berlin-1 "),
            Ok(("site".into(), "berlin-1".into()))
        );
        assert_eq!(
            parse_pair("row").unwrap_err(),
            "\"row\": a label is key=value"
        );
        assert_eq!(
            parse_pair("row=").unwrap_err(),
            "label \"row\" needs a value"
        );
        assert!(parse_pair("-x=1").unwrap_err().contains("must start with"));
        let mut many = Labels::new();
        many.insert("ok".into(), "1".into());
        many.insert("bad key".into(), "1".into());
        assert_eq!(
            problems("labels", &many),
            [
                "labels: label key \"bad key\" must start with a letter or digit and hold only letters, digits, '-', '_', '.' and '/'"
            ]
        );
    }
}
