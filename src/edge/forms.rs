//! Query strings and form bodies (`application/x-www-form-urlencoded`), and the display names
//! people type into them: the one parser every route uses, so that the API, the sign-in pages and
//! the authorization server read a field the same way.
//!
//! Decoding is the WHATWG `application/x-www-form-urlencoded` parser's (`url::form_urlencoded`):
//! `+` is a space, a `%` not followed by two hex digits stays as written, and bytes that are not
//! UTF-8 become U+FFFD. It never fails, so a malformed field is judged by the check of its value
//! (a client id that names nothing, a CSRF token that does not match), never answered with a 500.
//! Every field is kept in order, repeats included: whether a repeat is an error is the caller's
//! rule (the token endpoint refuses one, RFC 6749 section 3.2; the pages take the first).

use crate::edge::error::ApiError;

/// Name-value pairs in the order they were sent.
pub(crate) type Fields = Vec<(String, String)>;

/// The fields of a form body or of a query string's bytes.
pub(crate) fn parse(bytes: &[u8]) -> Fields {
    url::form_urlencoded::parse(bytes).into_owned().collect()
}

/// The fields of a request's query string (none when it has no query).
pub(crate) fn parse_query(query: Option<&str>) -> Fields {
    query.map(|q| parse(q.as_bytes())).unwrap_or_default()
}

/// The first value of field `name`, if the field is given (possibly empty).
pub(crate) fn first<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The first field name given more than once, if any.
pub(crate) fn repeated(fields: &[(String, String)]) -> Option<&str> {
    fields
        .iter()
        .enumerate()
        .find(|(i, (name, _))| fields[..*i].iter().any(|(n, _)| n == name))
        .map(|(_, (n, _))| n.as_str())
}

/// Whether a `Content-Type` value is `application/x-www-form-urlencoded` (parameters aside,
/// case-insensitive).
pub(crate) fn is_form_type(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|t| {
        t.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"))
    })
}

/// One form-encoded component on its own (HTTP Basic's client id and secret are form-encoded
/// before they are joined, RFC 6749 section 2.3.1): `+` is a space, then percent-decoding.
pub(crate) fn decode_component(s: &str) -> String {
    percent_encoding::percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned()
}

/// Longest display name, in characters (the `maxLength` of every `name` in the OpenAPI document).
pub(crate) const MAX_NAME_CHARS: usize = 100;

/// A display name: trimmed, 1-100 characters, none of them a control character (a NUL or an
/// escape sequence in a name ends up in terminals, logs and other systems' fields) nor hidden
/// text (`base::hidden_text`: a gateway's name goes into every client's `initialize`, where a
/// model reads what a reader of the name does not see).
pub(crate) fn display_name<'n>(field: &str, name: &'n str) -> Result<&'n str, ApiError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(ApiError::validation(field, format!("must be 1-{MAX_NAME_CHARS} characters")));
    }
    if name.chars().any(char::is_control) {
        return Err(ApiError::validation(field, "must not contain control characters"));
    }
    refuse_hidden_text(field, name)?;
    Ok(name)
}

/// Refuses text with hidden text in it, naming the field and the first finding (by its code
/// point, so the message carries none of it). For what toolgate stores and sends on, which is
/// refused rather than stripped: the sender sees what was wrong.
pub(crate) fn refuse_hidden_text(field: &str, text: &str) -> Result<(), ApiError> {
    match crate::base::hidden_text::strip(text).1.first() {
        Some(hit) => Err(ApiError::validation(field, format!("must not contain hidden text: {hit}"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(fields: &Fields) -> Vec<(&str, &str)> {
        fields.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn plus_is_a_space_and_percent_escapes_decode() {
        let f = parse(b"email=a%2Bb%40example.com&next=%2Fauth%2F%3Fx%3D1&name=Jane+Doe");
        assert_eq!(pairs(&f), [("email", "a+b@example.com"), ("next", "/auth/?x=1"), ("name", "Jane Doe")]);
        assert_eq!(decode_component("my+client%3Aid"), "my client:id");
        assert_eq!(decode_component("a%2Bb"), "a+b");
    }

    #[test]
    fn malformed_percent_encoding_is_kept_or_replaced_never_an_error() {
        let f = parse(b"a=%zz&b=100%&c=%e2%82&d=%ff");
        assert_eq!(pairs(&f), [("a", "%zz"), ("b", "100%"), ("c", "\u{fffd}"), ("d", "\u{fffd}")]);
        assert_eq!(decode_component("%zz%"), "%zz%");
        assert_eq!(decode_component("%ff"), "\u{fffd}");
    }

    #[test]
    fn repeated_fields_are_all_kept_in_order_and_found() {
        let f = parse(b"scope=a&code=1&scope=b");
        assert_eq!(pairs(&f), [("scope", "a"), ("code", "1"), ("scope", "b")]);
        assert_eq!(first(&f, "scope"), Some("a"));
        assert_eq!(repeated(&f), Some("scope"));
        assert_eq!(repeated(&parse(b"a=1&b=2")), None);
    }

    #[test]
    fn empty_input_fields_and_names() {
        assert!(parse(b"").is_empty());
        assert!(parse_query(None).is_empty());
        assert!(parse_query(Some("")).is_empty());
        // Empty pairs (`&&`) are skipped; a name without `=` has an empty value.
        let f = parse(b"&&flag&x=&=v");
        assert_eq!(pairs(&f), [("flag", ""), ("x", ""), ("", "v")]);
        assert_eq!(first(&f, "x"), Some(""));
        assert_eq!(first(&f, "missing"), None);
    }

    #[test]
    fn the_form_content_type_is_recognised_with_parameters_and_any_case() {
        assert!(is_form_type(Some("application/x-www-form-urlencoded")));
        assert!(is_form_type(Some("Application/X-WWW-Form-Urlencoded; charset=UTF-8")));
        assert!(!is_form_type(Some("application/json")));
        assert!(!is_form_type(Some("multipart/form-data; boundary=x")));
        assert!(!is_form_type(None));
    }

    #[test]
    fn display_names_are_trimmed_bounded_and_free_of_control_characters() {
        assert_eq!(display_name("name", "  My key ").unwrap(), "My key");
        assert_eq!(display_name("name", &"é".repeat(MAX_NAME_CHARS)).unwrap().chars().count(), MAX_NAME_CHARS);
        for bad in ["", "   ", "a\u{0}b", "a\u{1b}[31m", "line\nbreak"] {
            assert_eq!(display_name("name", bad).unwrap_err().status(), 400, "{bad:?}");
        }
        match display_name("name", "Support\u{E0049}\u{E0047}").unwrap_err() {
            ApiError::Validation { field, issue } => {
                assert_eq!(field, "name");
                assert_eq!(
                    issue,
                    "must not contain hidden text: a Unicode tag character (U+E0049) at character 7, 2 in all"
                );
            }
            e => panic!("{e:?}"),
        }
        for honest in ["Équipe 👨\u{200D}👩\u{200D}👧", "می\u{200C}خواهم", "日本語"] {
            assert_eq!(display_name("name", honest).unwrap(), honest);
        }
        let long = "x".repeat(MAX_NAME_CHARS + 1);
        match display_name("client_name", &long).unwrap_err() {
            ApiError::Validation { field, .. } => assert_eq!(field, "client_name"),
            e => panic!("{e:?}"),
        }
    }
}
