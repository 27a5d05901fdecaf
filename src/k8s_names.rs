//! Kubernetes' rules for names, label keys and label values, as
//! k8s.io/apimachinery's validation states them (`IsDNS1123Label`,
//! `IsDNS1123Subdomain`, `IsQualifiedName`, `IsValidLabelValue`). Every check of such
//! a name goes through here: checks written in several places had drifted apart, and
//! a name one part of refill took was refused by another, or by the API server.
//!
//! Each check says what is wrong in words a user can act on; the caller puts in front
//! which field and what kind of name it is. Lengths are counted in bytes, as Go
//! counts them; any text longer in bytes than in characters is refused for its
//! characters first, so "characters" in a message is never wrong.

/// A DNS-1123 label, and the name part of a label key, and a label value.
const LABEL_MAX: usize = 63;
/// A DNS-1123 subdomain.
const SUBDOMAIN_MAX: usize = 253;

/// A DNS-1123 label, `[a-z0-9]([-a-z0-9]*[a-z0-9])?` of at most 63: a namespace name.
pub(crate) fn dns_label(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err("it is empty".into());
    }
    if !is_dns_label(text) {
        return Err(
            "use only lowercase letters, digits and '-', starting and ending with a letter or digit"
                .into(),
        );
    }
    at_most(text, LABEL_MAX)
}

/// A DNS-1123 subdomain, DNS-1123 labels joined by '.', at most 253 in all (a label
/// in it may be longer than 63): the name of most objects (claims, nodes, backups).
pub(crate) fn dns_subdomain(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err("it is empty".into());
    }
    if !text.split('.').all(is_dns_label) {
        return Err(
            "use only lowercase letters, digits, '-' and '.', with a letter or digit at the start, at the end and on each side of every '.'"
                .into(),
        );
    }
    at_most(text, SUBDOMAIN_MAX)
}

/// A label key (a qualified name, also an annotation key): a name of at most 63
/// letters, digits, '-', '_' and '.', starting and ending with a letter or digit,
/// after an optional DNS-1123 subdomain prefix and a '/'.
pub(crate) fn label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some(_) if key.matches('/').count() > 1 => {
            return Err(
                "it holds more than one '/'; write it as a name, or as prefix/name with a DNS subdomain such as example.com for the prefix"
                    .into(),
            );
        }
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err(
                "its prefix before '/' is empty; write a DNS subdomain such as example.com there, or leave the '/' out"
                    .into(),
            );
        }
        if let Err(why) = dns_subdomain(prefix) {
            return Err(format!(
                "its prefix \"{prefix}\" is not a DNS subdomain such as example.com: {why}"
            ));
        }
    }
    if name.is_empty() {
        return Err(match prefix {
            Some(_) => "the name part after '/' is empty".into(),
            None => "it is empty".into(),
        });
    }
    if !is_label_name(name) || name.len() > LABEL_MAX {
        return Err(format!(
            "the name part takes up to {LABEL_MAX} letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A label value: empty, or up to 63 letters, digits, '-', '_' and '.', starting and
/// ending with a letter or digit.
pub(crate) fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    if !is_label_name(value) {
        return Err(
            "use only letters, digits, '-', '_' and '.', starting and ending with a letter or digit (or leave it empty)"
                .into(),
        );
    }
    at_most(value, LABEL_MAX)
}

fn at_most(text: &str, max: usize) -> Result<(), String> {
    if text.len() > max {
        Err(format!("it is longer than {max} characters"))
    } else {
        Ok(())
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, of any length.
fn is_dns_label(text: &str) -> bool {
    let edge = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    shaped(text, edge, |b| edge(b) || b == b'-')
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, of any length.
fn is_label_name(text: &str) -> bool {
    shaped(
        text,
        |b| b.is_ascii_alphanumeric(),
        |b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'),
    )
}

/// Not empty, every byte `inner`, the first and last also `edge`.
fn shaped(text: &str, edge: impl Fn(u8) -> bool, inner: impl Fn(u8) -> bool) -> bool {
    let bytes = text.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => edge(first) && edge(last) && bytes.iter().all(|&b| inner(b)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Check = fn(&str) -> Result<(), String>;

    /// Rows of apimachinery's own tests (pkg/api/validate/content), and the edges:
    /// each length limit and one past it, the separators at either end, uppercase,
    /// empty text, and text whose bytes outnumber its characters.
    fn rows() -> Vec<(&'static str, Check, String, bool)> {
        let r = |n: usize, c: &str| c.repeat(n);
        let label: Check = dns_label;
        let subdomain: Check = dns_subdomain;
        let key: Check = label_key;
        let value: Check = label_value;
        let mut rows = Vec::new();
        let mut add = |name, check, texts: Vec<String>, ok| {
            for text in texts {
                rows.push((name, check, text, ok));
            }
        };
        let s = |texts: &[&str]| texts.iter().map(|t| t.to_string()).collect::<Vec<_>>();

        add(
            "dns_label",
            label,
            s(&["a", "0", "a1", "1a", "a-1", "a--1--2--b", "1--a--b--2"]),
            true,
        );
        add(
            "dns_label",
            label,
            vec![r(63, "a"), format!("a{}a", r(61, "-"))],
            true,
        );
        add(
            "dns_label",
            label,
            s(&[
                "", "A", "aBc", "1-A", "-", "a-", "-a", "_", "a_", "_a", "a_b", ".", "a.", ".a",
                "a.b", " ", "a ", " a", "a b", "a.-b", "é", "a\n",
            ]),
            false,
        );
        add("dns_label", label, vec![r(64, "a"), r(32, "é")], false);

        add(
            "dns_subdomain",
            subdomain,
            s(&[
                "a",
                "0",
                "a-1",
                "a.a",
                "a--1--2--b.1",
                "0.1",
                "1.2.3.4.5",
                "aa.bb.cc.dd.ee",
                "example.com",
            ]),
            true,
        );
        // apimachinery bounds the whole, not each label: a label of 64 is fine here.
        add(
            "dns_subdomain",
            subdomain,
            vec![
                r(253, "a"),
                r(64, "a"),
                format!("{}.{}", r(126, "a"), r(126, "b")),
            ],
            true,
        );
        add(
            "dns_subdomain",
            subdomain,
            s(&[
                "", "A", "aB.a", "ab.A", "A.B.C", "-", "a-", "-a", "_", "a_b", ".", "a.", ".a",
                "a..b", "a.-b", "a-.b", "a.b-", " ", "a b", "a@b", "a,b", "a;b", "a:b", "a%b",
                "a/b", "é", "a\n",
            ]),
            false,
        );
        add(
            "dns_subdomain",
            subdomain,
            vec![r(254, "a"), r(127, "é")],
            false,
        );

        add(
            "label_key",
            key,
            s(&[
                "simple",
                "now-with-dashes",
                "1-starts-with-num",
                "1234",
                "simple/simple",
                "now.with.dots/simple",
                "1-num.2-num/3-num",
                "1.2.3.4/5678",
                "Uppercase_Is_OK_123",
                "example.com/Uppercase_Is_OK_123",
                "requests.storage-foo",
                "app.kubernetes.io/name",
                "a_b",
                "a.b",
            ]),
            true,
        );
        add(
            "label_key",
            key,
            vec![
                r(63, "a"),
                format!("{}/{}", r(253, "a"), r(63, "b")),
                format!("{}/x", r(64, "a")),
            ],
            true,
        );
        add(
            "label_key",
            key,
            s(&[
                "",
                "nospecialchars%^=@",
                "cantendwithadash-",
                "-cantstartwithadash-",
                "_a",
                "a_",
                ".a",
                "a.",
                "only/one/slash",
                "Example.com/abc",
                "example_com/abc",
                "a.-b/abc",
                "example.com/",
                "/simple",
                "/",
                "bad key",
                "é",
            ]),
            false,
        );
        add(
            "label_key",
            key,
            vec![
                r(64, "a"),
                format!("{}/abc", r(254, "a")),
                format!("example.com/{}", r(64, "b")),
            ],
            false,
        );

        add(
            "label_value",
            value,
            s(&[
                "",
                "simple",
                "now-with-dashes",
                "1-starts-with-num",
                "end-with-num-1",
                "1234",
            ]),
            true,
        );
        add(
            "label_value",
            value,
            s(&["MyValue", "my_value", "a.b", "a.-b", "a..b", "A"]),
            true,
        );
        add("label_value", value, vec![r(63, "a")], true);
        add(
            "label_value",
            value,
            s(&[
                "nospecialchars%^=@",
                "Tama-nui-te-rā.is.Māori.sun",
                "\\backslashes\\are\\bad",
                "-starts-with-dash",
                "ends-with-dash-",
                ".starts.with.dot",
                "ends.with.dot.",
                "_starts",
                "ends_",
                "no spaces",
                "a/b",
                " ",
            ]),
            false,
        );
        add("label_value", value, vec![r(64, "a"), r(32, "é")], false);
        rows
    }

    #[test]
    fn names_follow_apimachinery() {
        for (name, check, text, ok) in rows() {
            let got = check(&text);
            assert_eq!(got.is_ok(), ok, "{name}({text:?}) gave {got:?}");
            if let Err(why) = got {
                assert!(!why.is_empty(), "{name}({text:?}) says nothing");
            }
        }
    }

    #[test]
    fn each_refusal_says_what_is_wrong() {
        let says = |got: Result<(), String>, words: &str| {
            let why = got.unwrap_err();
            assert!(why.contains(words), "{why:?} lacks {words:?}");
        };
        says(dns_label(""), "empty");
        says(dns_label(&"a".repeat(64)), "longer than 63");
        says(dns_label("a.b"), "lowercase letters, digits and '-'");
        says(dns_subdomain(&"a".repeat(254)), "longer than 253");
        says(dns_subdomain("a.-b"), "on each side of every '.'");
        says(label_key("a/b/c"), "more than one '/'");
        says(label_key("/x"), "prefix before '/' is empty");
        says(label_key("Example.com/x"), "is not a DNS subdomain");
        says(label_key("example.com/"), "name part after '/' is empty");
        says(label_key(&"a".repeat(64)), "up to 63");
        says(
            label_value("-x"),
            "starting and ending with a letter or digit",
        );
        says(label_value(&"a".repeat(64)), "longer than 63");
    }
}
