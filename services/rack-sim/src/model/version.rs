//! The firmware version an update installs, read from its `ImageURI`.
//!
//! The rule, in order:
//!
//! 1. A `version=<v>` query parameter (non-empty) wins:
//!    `http://img/fw.bin?version=1.2.3` installs `1.2.3`.
//! 2. Otherwise take the last path segment (query and fragment removed) and
//!    strip known extensions from its end, repeatedly and case-insensitively:
//!    `.bin`, `.fwpkg`, `.pldm`, `.img`, `.tar`, `.gz`, `.tgz`, `.zip`.
//! 3. The version is the rest of that stem from the first *token start*: a
//!    position at the start of the stem or right after `-` or `_`, holding
//!    an ASCII digit, or `v`/`V`/`r`/`R` followed by an ASCII digit.
//!    `compute-bmc-25.09-1.bin` → `25.09-1`; `nvos_25.02.2200.fwpkg` →
//!    `25.02.2200`; `pmc-r1.4.0.tar.gz` → `r1.4.0`; `GB200_uefi-02.05.01.bin`
//!    → `02.05.01` (`GB200` starts with a letter).
//! 4. With no token start, the whole stem is the version (`latest.bin` →
//!    `latest`); an empty stem is an error.

/// Extensions stripped from the image name.
const EXTENSIONS: [&str; 8] = [
    ".bin", ".fwpkg", ".pldm", ".img", ".tar", ".gz", ".tgz", ".zip",
];

/// The version `image_uri` installs, or `None` if its name is empty.
pub fn version_from_image_uri(image_uri: &str) -> Option<String> {
    let (without_fragment, _) = image_uri.split_once('#').unwrap_or((image_uri, ""));
    let (path, query) = without_fragment
        .split_once('?')
        .unwrap_or((without_fragment, ""));
    if let Some(v) = query
        .split('&')
        .filter_map(|pair| pair.strip_prefix("version="))
        .find(|v| !v.is_empty())
    {
        return Some(v.to_owned());
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = strip_extensions(name);
    if stem.is_empty() {
        return None;
    }
    let bytes = stem.as_bytes();
    let starts_token = |i: usize| {
        let after_separator = i == 0 || matches!(bytes[i - 1], b'-' | b'_');
        let digit_at = |j: usize| bytes.get(j).is_some_and(u8::is_ascii_digit);
        after_separator
            && (digit_at(i) || (matches!(bytes[i], b'v' | b'V' | b'r' | b'R') && digit_at(i + 1)))
    };
    let start = (0..bytes.len()).find(|&i| starts_token(i)).unwrap_or(0);
    Some(stem[start..].to_owned())
}

fn strip_extensions(mut name: &str) -> &str {
    loop {
        let lower = name.to_ascii_lowercase();
        match EXTENSIONS.iter().find(|ext| lower.ends_with(*ext)) {
            Some(ext) if name.len() > ext.len() => name = &name[..name.len() - ext.len()],
            Some(_) => return "",
            None => return name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::version_from_image_uri as v;

    #[test]
    fn versions_from_names() {
        assert_eq!(
            v("http://img/compute-bmc-25.09-1.bin").as_deref(),
            Some("25.09-1")
        );
        assert_eq!(
            v("https://img/nvos_25.02.2200.fwpkg").as_deref(),
            Some("25.02.2200")
        );
        assert_eq!(v("http://img/pmc-r1.4.0.tar.gz").as_deref(), Some("r1.4.0"));
        assert_eq!(
            v("http://img/GB200_uefi-02.05.01.bin").as_deref(),
            Some("02.05.01")
        );
        assert_eq!(v("http://img/25.10.bin").as_deref(), Some("25.10"));
        assert_eq!(v("http://img/fw-v2.1.PLDM").as_deref(), Some("v2.1"));
        assert_eq!(v("http://img/latest.bin").as_deref(), Some("latest"));
        assert_eq!(
            v("http://img/bmc-25.09-1.bin#frag").as_deref(),
            Some("25.09-1")
        );
    }

    #[test]
    fn a_version_query_wins() {
        assert_eq!(
            v("http://img/compute-bmc-25.09-1.bin?version=9.9.9").as_deref(),
            Some("9.9.9")
        );
        assert_eq!(
            v("http://img/x.bin?token=a&version=1.0&y=2").as_deref(),
            Some("1.0")
        );
        assert_eq!(v("http://img/bmc-1.2.bin?version=").as_deref(), Some("1.2"));
    }

    #[test]
    fn empty_names_have_no_version() {
        assert_eq!(v("http://img/"), None);
        assert_eq!(v("http://img/.bin"), None);
    }
}
