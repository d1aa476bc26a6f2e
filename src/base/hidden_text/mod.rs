//! Text a reader's screen does not show but a model reads: Unicode tag characters, zero-width
//! and other invisible format characters, bidirectional controls, ANSI escape sequences, other
//! control characters, variation selectors, private-use characters, fillers and separators.
//! [`strip`] removes them and says what it removed, one [`Hit`] per class.
//!
//! The set is Unicode's (`classes.rs`): every Default_Ignorable_Code_Point and every character
//! of category Cf but the few that are drawn, and the characters that show as blank though
//! their category says otherwise. The same characters make emoji sequences, subdivision flags,
//! variation sequences and the joining scripts right, so each is judged where it stands
//! (`honest.rs`): honest text passes byte for byte (the corpus of both kinds is
//! `tests/fixtures/hidden_text/corpus.json`). The definitions of the apps (`mcp/clean.rs`) and
//! the names toolgate sends itself (gateway names and descriptions, apps) are checked with it.
//!
//! A string of printable ASCII (with tabs and line breaks) is returned borrowed after one pass
//! over its bytes; only a string with a non-ASCII or control byte is walked by character, and a
//! new string is made only once something is removed.

mod classes;
mod honest;

use classes::class_of;
use honest::Context;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// A kind of hidden text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HiddenClass {
    /// U+E0000-U+E007F: an invisible copy of ASCII ("ASCII smuggling"), but in a subdivision
    /// flag.
    Tag,
    /// U+200B-U+200F (ZWSP, ZWNJ, ZWJ, LRM, RLM), U+2060-U+2064, U+206A-U+206F, U+FEFF, U+180E,
    /// U+00AD (soft hyphen), U+034F (combining grapheme joiner), U+FFF9-U+FFFB (interlinear
    /// annotation); ZWJ, ZWNJ, LRM, RLM and U+180E are honest in their contexts.
    ZeroWidth,
    /// U+202A-U+202E, U+2066-U+2069, U+061C: text shown in another order than it is read.
    Bidi,
    /// ESC `[` ... final byte (CSI), ESC `]` ... BEL or ESC `\` (OSC), and a lone ESC.
    AnsiEscape,
    /// C0 controls but tab, line feed and carriage return; DEL; C1 controls.
    Control,
    /// U+FE00-U+FE0F, U+E0100-U+E01EF and the Mongolian free variation selectors, except one
    /// right after a character that has variation sequences (as in "❤️"): a run of selectors
    /// can carry any bytes behind one visible character.
    VariationSelector,
    /// U+E000-U+F8FF and planes 15 and 16: no meaning outside a private agreement, shown as a
    /// box or an icon font's glyph.
    PrivateUse,
    /// Characters drawn as nothing that pass for a letter or a space: the Hangul fillers
    /// (U+115F, U+1160, U+3164, U+FFA0), the Braille blank U+2800 (but between Braille cells)
    /// and the object replacement character U+FFFC.
    Filler,
    /// The line and paragraph separators U+2028 and U+2029 (a JSON string may carry them, a
    /// JavaScript one may not); stripped, each becomes a line feed.
    Separator,
    /// Every other Default_Ignorable_Code_Point or format character (Cf): the Egyptian
    /// hieroglyph, shorthand and musical symbol format controls, Khmer's inherent vowels, the
    /// reserved ignorable code points, and any Cf a later Unicode version adds.
    Format,
}

impl HiddenClass {
    pub const ALL: [HiddenClass; 10] = [
        HiddenClass::Tag,
        HiddenClass::ZeroWidth,
        HiddenClass::Bidi,
        HiddenClass::AnsiEscape,
        HiddenClass::Control,
        HiddenClass::VariationSelector,
        HiddenClass::PrivateUse,
        HiddenClass::Filler,
        HiddenClass::Separator,
        HiddenClass::Format,
    ];

    /// The class's name in findings, logs and metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            HiddenClass::Tag => "tag",
            HiddenClass::ZeroWidth => "zero_width",
            HiddenClass::Bidi => "bidi",
            HiddenClass::AnsiEscape => "ansi_escape",
            HiddenClass::Control => "control",
            HiddenClass::VariationSelector => "variation_selector",
            HiddenClass::PrivateUse => "private_use",
            HiddenClass::Filler => "filler",
            HiddenClass::Separator => "separator",
            HiddenClass::Format => "format",
        }
    }
}

impl fmt::Display for HiddenClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HiddenClass::Tag => "a Unicode tag character",
            HiddenClass::ZeroWidth => "a zero-width character",
            HiddenClass::Bidi => "a bidirectional control",
            HiddenClass::AnsiEscape => "an ANSI escape sequence",
            HiddenClass::Control => "a control character",
            HiddenClass::VariationSelector => "a variation selector",
            HiddenClass::PrivateUse => "a private-use character",
            HiddenClass::Filler => "a filler character",
            HiddenClass::Separator => "a line or paragraph separator",
            HiddenClass::Format => "an invisible format character",
        })
    }
}

/// What [`strip`] removed of one class from one string: the first such character (for an ANSI
/// escape sequence, its ESC), where it was (in characters from the start) and how many
/// characters of the class were removed. Serialised with the code point as `U+XXXX`, and read
/// back, so a finding can be kept in a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hit {
    pub class: HiddenClass,
    /// The first character's code point (shown `U+XXXX`).
    #[serde(serialize_with = "code_point", deserialize_with = "read_code_point")]
    pub code_point: u32,
    /// Its position, in characters.
    pub at: usize,
    pub count: usize,
}

fn code_point<S: serde::Serializer>(cp: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("U+{cp:04X}"))
}

fn read_code_point<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let text = String::deserialize(d)?;
    text.strip_prefix("U+")
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or_else(|| serde::de::Error::custom(format!("`{text}` is not a code point written U+XXXX")))
}

impl fmt::Display for Hit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (U+{:04X}) at character {}", self.class, self.code_point, self.at)?;
        if self.count > 1 {
            write!(f, ", {} in all", self.count)?;
        }
        Ok(())
    }
}

/// Printable ASCII, tab, line feed and carriage return: nothing to look at.
fn plain(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7F).contains(&b) || matches!(b, b'\t' | b'\n' | b'\r'))
}

/// `s` without its hidden text, and what was removed (one [`Hit`] per class, in the order each
/// class first appears). Borrowed when nothing was removed.
pub(crate) fn strip(s: &str) -> (Cow<'_, str>, Vec<Hit>) {
    if plain(s) {
        return (Cow::Borrowed(s), Vec::new());
    }
    let mut out: Option<String> = None;
    let mut hits: Vec<Hit> = Vec::new();
    let mut context = Context::new(s);
    let mut chars = s.char_indices().enumerate().peekable();
    while let Some((at, (start, c))) = chars.next() {
        let rest = &s[start + c.len_utf8()..];
        let class = class_of(c).filter(|_| !context.honest(c, rest));
        context.passed(c, class.is_none(), rest);
        let Some(class) = class else {
            if let Some(out) = out.as_mut() {
                out.push(c);
            }
            continue;
        };
        let mut count = 1;
        if class == HiddenClass::AnsiEscape {
            count += escape_tail(&mut chars);
        }
        let out = out.get_or_insert_with(|| s[..start].to_string());
        if class == HiddenClass::Separator {
            // A line or paragraph separator still separates: it becomes a line feed.
            out.push('\n');
        }
        match hits.iter_mut().find(|h| h.class == class) {
            Some(h) => h.count += count,
            None => hits.push(Hit { class, code_point: c as u32, at, count }),
        }
    }
    (out.map_or(Cow::Borrowed(s), Cow::Owned), hits)
}

/// The rest of an escape sequence after its ESC, consumed; returns how many characters it had.
/// CSI: parameter and intermediate bytes, then one final byte. OSC: everything up to and
/// including BEL or ESC `\` (or the end). Anything else: the ESC alone.
fn escape_tail<I: Iterator<Item = (usize, (usize, char))>>(chars: &mut std::iter::Peekable<I>) -> usize {
    let mut n = 0;
    match chars.peek().map(|&(_, (_, c))| c) {
        Some('[') => {
            chars.next();
            n += 1;
            while chars.next_if(|&(_, (_, c))| ('\u{20}'..='\u{3F}').contains(&c)).is_some() {
                n += 1;
            }
            if chars.next_if(|&(_, (_, c))| ('\u{40}'..='\u{7E}').contains(&c)).is_some() {
                n += 1;
            }
        }
        Some(']') => {
            chars.next();
            n += 1;
            while let Some((_, (_, c))) = chars.next() {
                n += 1;
                if c == '\u{07}' {
                    break;
                }
                if c == '\u{1B}' && chars.next_if(|&(_, (_, c))| c == '\\').is_some() {
                    n += 1;
                    break;
                }
            }
        }
        _ => {}
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &str) -> (String, Hit) {
        let (out, hits) = strip(s);
        assert_eq!(hits.len(), 1, "{s:?}: {hits:?}");
        (out.into_owned(), hits[0])
    }

    #[test]
    fn plain_text_is_borrowed() {
        for s in ["", "Search the web.\n\tTabs and\r\nbreaks stay.", "naïve café ❤️ 日本語 👍🏽"] {
            let (out, hits) = strip(s);
            assert!(matches!(out, Cow::Borrowed(_)), "{s:?}");
            assert!(hits.is_empty(), "{s:?}: {hits:?}");
        }
    }

    #[test]
    fn tag_characters_are_removed() {
        // "hi" followed by tag-encoded "IGNORE" and the cancel tag.
        let hidden: String = "IGNORE".chars().map(|c| char::from_u32(0xE0000 + c as u32).unwrap()).collect();
        let (out, hit) = one(&format!("hi{hidden}\u{E007F}!"));
        assert_eq!(out, "hi!");
        assert_eq!(hit, Hit { class: HiddenClass::Tag, code_point: 0xE0049, at: 2, count: 7 });
        assert_eq!(hit.to_string(), "a Unicode tag character (U+E0049) at character 2, 7 in all");
    }

    #[test]
    fn zero_width_characters_are_removed() {
        for c in ['\u{200B}', '\u{200C}', '\u{200D}', '\u{200E}', '\u{200F}', '\u{2060}', '\u{2064}', '\u{FEFF}']
            .into_iter()
            .chain(['\u{180E}', '\u{00AD}', '\u{034F}', '\u{FFF9}', '\u{206A}'])
        {
            let (out, hit) = one(&format!("a{c}b"));
            assert_eq!(out, "ab", "U+{:04X}", c as u32);
            assert_eq!((hit.class, hit.code_point, hit.at), (HiddenClass::ZeroWidth, c as u32, 1));
        }
    }

    #[test]
    fn bidirectional_controls_are_removed() {
        for c in ['\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}', '\u{061C}'] {
            let (out, hit) = one(&format!("abc{c}def{c}"));
            assert_eq!(out, "abcdef");
            assert_eq!((hit.class, hit.code_point, hit.at, hit.count), (HiddenClass::Bidi, c as u32, 3, 2));
        }
    }

    #[test]
    fn ansi_escape_sequences_are_removed_whole() {
        let cases = [
            ("red \u{1B}[31mALERT\u{1B}[0m done", "red ALERT done", 9),
            ("a\u{1B}[2;37;40mb", "ab", 10),
            ("link \u{1B}]8;;https://evil.example\u{07}text", "link text", 26),
            ("t\u{1B}]0;title\u{1B}\\x", "tx", 11),
            ("lone \u{1B}x", "lone x", 1),
            ("cut \u{1B}[12", "cut ", 4),
            ("open \u{1B}]unterminated", "open ", 14),
        ];
        for (input, want, count) in cases {
            let (out, hit) = one(input);
            assert_eq!(out, want, "{input:?}");
            assert_eq!((hit.class, hit.code_point, hit.count), (HiddenClass::AnsiEscape, 0x1B, count), "{input:?}");
        }
    }

    #[test]
    fn other_control_characters_are_removed_but_tabs_and_breaks_stay() {
        for c in ['\u{0}', '\u{7}', '\u{8}', '\u{B}', '\u{C}', '\u{1F}', '\u{7F}', '\u{80}', '\u{9B}', '\u{9F}'] {
            let (out, hit) = one(&format!("a\t{c}b\r\n"));
            assert_eq!(out, "a\tb\r\n", "U+{:04X}", c as u32);
            assert_eq!((hit.class, hit.code_point, hit.at), (HiddenClass::Control, c as u32, 2));
        }
    }

    #[test]
    fn variation_selectors_are_removed_except_one_presentation_selector() {
        // Emoji and text presentation after a character stay.
        assert!(strip("I \u{2764}\u{FE0F} it \u{2603}\u{FE0E}").1.is_empty());
        // Bytes smuggled as selectors behind one emoji: all but a leading FE0F go.
        let (out, hit) = one("\u{1F600}\u{FE0F}\u{FE01}\u{E0100}\u{E01EF}!");
        assert_eq!(out, "\u{1F600}\u{FE0F}!");
        assert_eq!(hit, Hit { class: HiddenClass::VariationSelector, code_point: 0xFE01, at: 2, count: 3 });
        // At the start, or after another selector, even FE0F goes.
        let (out, hit) = one("\u{FE0F}\u{2764}\u{FE0F}\u{FE0F}");
        assert_eq!(out, "\u{2764}\u{FE0F}");
        assert_eq!((hit.at, hit.count), (0, 2));
        // After a removed character it has nothing to select.
        let (out, _) = strip("a\u{200B}\u{FE0F}");
        assert_eq!(out, "a");
    }

    #[test]
    fn private_use_characters_are_removed() {
        for c in ['\u{E000}', '\u{F8FF}', '\u{F0000}', '\u{10FFFD}'] {
            let (out, hit) = one(&format!("x{c}"));
            assert_eq!(out, "x");
            assert_eq!((hit.class, hit.code_point, hit.at), (HiddenClass::PrivateUse, c as u32, 1));
        }
    }

    #[test]
    fn several_classes_give_one_hit_each_in_order() {
        let (out, hits) = strip("\u{202E}a\u{200B}b\u{E0041}c\u{200B}");
        assert_eq!(out, "abc");
        let classes: Vec<_> = hits.iter().map(|h| (h.class.as_str(), h.at, h.count)).collect();
        assert_eq!(classes, [("bidi", 0, 1), ("zero_width", 2, 2), ("tag", 4, 1)]);
        let json = serde_json::to_value(hits[2]).unwrap();
        assert_eq!(json, serde_json::json!({"class": "tag", "code_point": "U+E0041", "at": 4, "count": 1}));
        assert_eq!(serde_json::from_value::<Hit>(json).unwrap(), hits[2], "a finding reads back");
        let bad = serde_json::json!({"class": "tag", "code_point": "E0041", "at": 4, "count": 1});
        assert!(serde_json::from_value::<Hit>(bad).is_err());
    }

    /// The corpus (`tests/fixtures/hidden_text/corpus.json`, named for Unicode 18): every honest
    /// text comes back borrowed, byte for byte; every hostile one is stripped to its clean text
    /// with its classes found in order.
    #[test]
    fn the_corpus_honest_passes_and_hostile_is_stripped() {
        let corpus: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/hidden_text/corpus.json")).unwrap();
        assert_eq!(corpus["unicode"], "18.0.0");
        let text = |e: &serde_json::Value, k: &str| e[k].as_str().unwrap().to_string();
        for e in corpus["honest"].as_array().unwrap() {
            let t = text(e, "text");
            let (out, hits) = strip(&t);
            assert!(matches!(out, Cow::Borrowed(_)) && hits.is_empty(), "{}: {hits:?}", e["name"]);
        }
        for e in corpus["hostile"].as_array().unwrap() {
            let t = text(e, "text");
            let (out, hits) = strip(&t);
            assert_eq!(out, text(e, "clean"), "{}", e["name"]);
            let classes: Vec<&str> = hits.iter().map(|h| h.class.as_str()).collect();
            assert_eq!(serde_json::json!(classes), e["classes"], "{}", e["name"]);
        }
    }
}
