//! Where an invisible character is honest: the same code points that hide text in one place
//! make emoji, flags and whole scripts right in another, and stripping them there corrupts the
//! text. Each rule admits one character in one context, never a run, so what passes can carry
//! no more than a bit per visible character:
//!
//! - a ZWJ between two emoji (after the first's presentation selector or skin tone), as in
//!   👨‍👩‍👧 or 🏳️‍🌈;
//! - a ZWJ or ZWNJ after a letter or mark of a joining script (Arabic, Syriac, N'Ko, Mongolian,
//!   the Indic scripts, Myanmar, Khmer, Tibetan, ...) followed by another, or after a virama;
//! - the tag characters of a subdivision flag: U+1F3F4, a subdivision id (a region of two
//!   letters or three digits, then one to four letters or digits) in tags, and U+E007F;
//! - one variation selector after a character that has variation sequences: U+FE0E/U+FE0F and
//!   U+FE00-U+FE0D after an emoji, a symbol, a CJK ideograph or a Myanmar letter; an
//!   ideographic variation selector (U+E0100-U+E01EF) after a CJK ideograph; a Mongolian
//!   free variation selector after a Mongolian letter, and the Mongolian vowel separator
//!   between two;
//! - LRM, RLM and ALM in text with right-to-left letters, next to no other hidden character;
//! - the Braille blank between Braille cells (the space of Braille text).
//!
//! Bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069) are never honest here:
//! they make text read in another order than it shows (Trojan Source), and a definition needs
//! none.

use super::classes::class_of;
use unicode_properties::{GeneralCategoryGroup, UnicodeEmoji, UnicodeGeneralCategory};

const ZWNJ: char = '\u{200C}';
const ZWJ: char = '\u{200D}';
const BLACK_FLAG: char = '\u{1F3F4}';
const CANCEL_TAG: char = '\u{E007F}';

/// Scripts whose letters join, or whose consonants form conjuncts, so that ZWJ and ZWNJ choose
/// a form: Arabic to Mandaic and the Arabic extensions, the Indic scripts of the BMP, Tibetan,
/// Myanmar, Khmer and Mongolian, Phags-pa, Devanagari Extended, Myanmar's extensions, Arabic
/// presentation forms, the joining scripts of the SMP (Manichaean, Psalter Pahlavi, Hanifi
/// Rohingya, Arabic Extended-C, Sogdian, Old Uyghur, Chorasmian), the Brahmic scripts of the
/// SMP, and Adlam.
const JOINING: [(u32, u32); 15] = [
    (0x0600, 0x08FF),
    (0x0900, 0x0DFF),
    (0x0F00, 0x109F),
    (0x1780, 0x18AF),
    (0xA840, 0xA87F),
    (0xA8E0, 0xA8FF),
    (0xA9E0, 0xA9FF),
    (0xAA60, 0xAA7F),
    (0xFB50, 0xFDFF),
    (0xFE70, 0xFEFE),
    (0x10AC0, 0x10BAF),
    (0x10D00, 0x10D3F),
    (0x10EC0, 0x10FFF),
    (0x11000, 0x11DFF),
    (0x1E900, 0x1E95F),
];

/// The right-to-left blocks: Hebrew to the Arabic extensions, the Hebrew and Arabic
/// presentation forms, and the right-to-left ranges of the SMP.
const RTL: [(u32, u32); 5] =
    [(0x0590, 0x08FF), (0xFB1D, 0xFDFF), (0xFE70, 0xFEFE), (0x10800, 0x10FFF), (0x1E800, 0x1EFFF)];

/// CJK Unified Ideographs and their extensions, and the compatibility ideographs.
const CJK: [(u32, u32); 4] = [(0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3FFFF)];

/// Letters with standardized variation sequences besides symbols and ideographs: Myanmar and
/// its extensions, Phags-pa, Manichaean.
const VARIANT_LETTERS: [(u32, u32); 5] =
    [(0x1000, 0x109F), (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F), (0xA840, 0xA87F), (0x10AC0, 0x10AFF)];

fn within(table: &[(u32, u32)], c: char) -> bool {
    let cp = c as u32;
    table.iter().any(|&(lo, hi)| (lo..=hi).contains(&cp))
}

fn letter_or_mark(c: char) -> bool {
    matches!(c.general_category_group(), GeneralCategoryGroup::Letter | GeneralCategoryGroup::Mark)
}

fn joining(c: char) -> bool {
    within(&JOINING, c) && letter_or_mark(c)
}

/// An emoji that a ZWJ may join: the Emoji property, not an ASCII digit, `#` or `*`.
fn pictographic(c: char) -> bool {
    !c.is_ascii() && c.is_emoji_char()
}

fn mongolian(c: char) -> bool {
    matches!(c as u32, 0x1820..=0x18AA | 0x11660..=0x1167F) && letter_or_mark(c)
}

fn braille(c: char) -> bool {
    ('\u{2800}'..='\u{28FF}').contains(&c)
}

/// A character that has variation sequences with U+FE00-U+FE0F.
fn variant_base(c: char) -> bool {
    c.is_emoji_char()
        || c.general_category_group() == GeneralCategoryGroup::Symbol
        || within(&CJK, c)
        || within(&VARIANT_LETTERS, c)
}

/// The number of tag characters after a U+1F3F4 that make a subdivision flag (the id and the
/// cancel tag), or 0 when `rest` does not start with one.
fn flag_tags(rest: &str) -> usize {
    // The subdivision id, in the ASCII the tags copy.
    let mut id = [0u8; 7];
    let mut n = 0;
    for c in rest.chars() {
        if c == CANCEL_TAG {
            let id = &id[..n];
            let region =
                id.len() >= 3 && (id[..2].iter().all(u8::is_ascii_lowercase) || id[..3].iter().all(u8::is_ascii_digit));
            return if region { n + 1 } else { 0 };
        }
        let ascii = u8::try_from((c as u32).wrapping_sub(0xE0000)).ok();
        match ascii.filter(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
            Some(b) if n < id.len() => {
                id[n] = b;
                n += 1;
            }
            _ => return 0,
        }
    }
    0
}

/// What the walk of one string knows of the characters around the one it looks at.
pub(super) struct Context<'s> {
    text: &'s str,
    /// The character before, and whether it was kept.
    prev: Option<(char, bool)>,
    /// Tag characters still to come in a subdivision flag.
    flag_tags: usize,
    /// Whether the text has a right-to-left letter, once asked.
    rtl: Option<bool>,
}

impl<'s> Context<'s> {
    pub(super) fn new(text: &'s str) -> Context<'s> {
        Context { text, prev: None, flag_tags: 0, rtl: None }
    }

    /// Notes the character at hand, kept or not; `rest` is the text after it.
    pub(super) fn passed(&mut self, c: char, kept: bool, rest: &str) {
        self.prev = Some((c, kept));
        if c == BLACK_FLAG && kept {
            self.flag_tags = flag_tags(rest);
        } else if !('\u{E0020}'..=CANCEL_TAG).contains(&c) {
            self.flag_tags = 0;
        }
    }

    /// The character before, if it was kept.
    fn kept_before(&self) -> Option<char> {
        self.prev.and_then(|(c, kept)| kept.then_some(c))
    }

    /// Whether `c`, which is hidden text on its own, is honest here; `rest` is the text after it.
    pub(super) fn honest(&mut self, c: char, rest: &str) -> bool {
        let next = rest.chars().next();
        match c {
            '\u{E0020}'..=CANCEL_TAG if self.flag_tags > 0 => {
                self.flag_tags -= 1;
                true
            }
            ZWJ if self.emoji_joint(next) => true,
            ZWJ | ZWNJ => self.script_joint(next),
            '\u{200E}' | '\u{200F}' | '\u{061C}' => self.bidi_mark(next),
            '\u{FE00}'..='\u{FE0F}' => self.kept_before().is_some_and(variant_base),
            '\u{E0100}'..='\u{E01EF}' => self.kept_before().is_some_and(|b| within(&CJK, b)),
            '\u{180B}'..='\u{180D}' | '\u{180F}' => self.kept_before().is_some_and(mongolian),
            '\u{180E}' => self.kept_before().is_some_and(mongolian) && next.is_some_and(mongolian),
            '\u{2800}' => self.kept_before().is_some_and(braille) && next.is_some_and(braille),
            _ => false,
        }
    }

    /// A ZWJ after an emoji (its presentation selector, skin tone or flag's cancel tag kept)
    /// and before another.
    fn emoji_joint(&self, next: Option<char>) -> bool {
        let after_emoji = self.kept_before().is_some_and(|b| {
            pictographic(b) || b == '\u{FE0F}' || b == CANCEL_TAG || ('\u{1F3FB}'..='\u{1F3FF}').contains(&b)
        });
        after_emoji && next.is_some_and(pictographic)
    }

    /// A ZWJ or ZWNJ inside a word of a joining script, or after a virama (a mark) with no
    /// hidden character after it.
    fn script_joint(&self, next: Option<char>) -> bool {
        let Some(before) = self.kept_before().filter(|&b| joining(b)) else {
            return false;
        };
        next.is_some_and(joining)
            || (before.general_category_group() == GeneralCategoryGroup::Mark
                && next.is_none_or(|n| class_of(n).is_none()))
    }

    /// LRM, RLM or ALM in text that has a right-to-left letter, with no hidden character on
    /// either side.
    fn bidi_mark(&mut self, next: Option<char>) -> bool {
        let before_clean = self.prev.is_none_or(|(_, kept)| kept);
        let after_clean = next.is_none_or(|n| class_of(n).is_none());
        let text = self.text;
        before_clean
            && after_clean
            && *self.rtl.get_or_insert_with(|| {
                text.chars().any(|c| within(&RTL, c) && c.general_category_group() == GeneralCategoryGroup::Letter)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subdivision_flag_is_its_tags_and_the_cancel_tag() {
        let tags = |s: &str| s.chars().map(|c| char::from_u32(0xE0000 + c as u32).unwrap()).collect::<String>();
        assert_eq!(flag_tags(&format!("{}\u{E007F}", tags("gbsct"))), 6);
        assert_eq!(flag_tags(&format!("{}\u{E007F}!", tags("usca"))), 5);
        assert_eq!(flag_tags(&format!("{}\u{E007F}", tags("001ab"))), 6, "a numeric region");
        for bad in ["gb", "gbsct!", "GBSCT", "gbsctabc", "g1sct", "ignoreall"] {
            assert_eq!(flag_tags(&format!("{}\u{E007F}", tags(bad))), 0, "{bad}");
        }
        assert_eq!(flag_tags(&tags("gbsct")), 0, "no cancel tag");
    }
}
