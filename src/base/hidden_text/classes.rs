//! The class of one character on its own, from Unicode's properties: Default_Ignorable_Code_Point
//! (DerivedCoreProperties.txt), general category Cf (the `unicode-properties` tables), and the
//! characters that show as nothing though Unicode gives them a visible category (the fillers,
//! the line and paragraph separators). Whether a character in this set is honest where it stands
//! is `honest.rs`'s question.

use super::HiddenClass;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Other_Default_Ignorable_Code_Point (PropList.txt) that the fixed classes below do not name:
/// Khmer's inherent vowels, the reserved U+2065 and U+FFF0-U+FFF8, and the unassigned rest of
/// plane 14. With Cf and Variation_Selector (named below) it makes Default_Ignorable_Code_Point.
const OTHER_IGNORABLE: [(u32, u32); 4] = [(0x17B4, 0x17B5), (0x2065, 0x2065), (0xFFF0, 0xFFF8), (0xE0080, 0xE0FFF)];

/// Prepended_Concatenation_Mark (PropList.txt): category Cf, but each is drawn, spanning the
/// digits after it (the Arabic number sign, the end of ayah, the Syriac abbreviation mark, the
/// Kaithi number signs). Honest text: not hidden.
const DRAWN_FORMAT: [(u32, u32); 7] = [
    (0x0600, 0x0605),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
];

fn within(table: &[(u32, u32)], cp: u32) -> bool {
    table.iter().any(|&(lo, hi)| (lo..=hi).contains(&cp))
}

/// The class of `c` on its own, or `None` when it is never hidden text.
pub(super) fn class_of(c: char) -> Option<HiddenClass> {
    let class = match c as u32 {
        0xE0000..=0xE007F => HiddenClass::Tag,
        0x200B..=0x200F | 0x2060..=0x2064 | 0x206A..=0x206F | 0xFEFF | 0x180E | 0x00AD | 0x034F | 0xFFF9..=0xFFFB => {
            HiddenClass::ZeroWidth
        }
        0x202A..=0x202E | 0x2066..=0x2069 | 0x061C => HiddenClass::Bidi,
        0x1B => HiddenClass::AnsiEscape,
        0x09 | 0x0A | 0x0D => return None,
        0x00..=0x1F | 0x7F..=0x9F => HiddenClass::Control,
        0xFE00..=0xFE0F | 0xE0100..=0xE01EF | 0x180B..=0x180D | 0x180F => HiddenClass::VariationSelector,
        0xE000..=0xF8FF | 0xF0000..=0xFFFFD | 0x100000..=0x10FFFD => HiddenClass::PrivateUse,
        0x115F | 0x1160 | 0x3164 | 0xFFA0 | 0x2800 | 0xFFFC => HiddenClass::Filler,
        0x2028 | 0x2029 => HiddenClass::Separator,
        // Egyptian hieroglyph, shorthand and musical format controls: Cf, named so that they are
        // caught whatever the tables say.
        0x13430..=0x1343F | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A => HiddenClass::Format,
        cp => return format_class(c, cp),
    };
    Some(class)
}

/// The rest of Default_Ignorable_Code_Point and Cf. Below U+0600, in the CJK ideographs and the
/// Hangul syllables there is none but those `class_of` names, so the table is not searched there.
fn format_class(c: char, cp: u32) -> Option<HiddenClass> {
    if cp < 0x0600 || (0x3400..0xA000).contains(&cp) || (0xAC00..0xD7A4).contains(&cp) {
        return None;
    }
    let hidden =
        within(&OTHER_IGNORABLE, cp) || (c.general_category() == GeneralCategory::Format && !within(&DRAWN_FORMAT, cp));
    hidden.then_some(HiddenClass::Format)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Unicode version of the property tables: a new version can add format characters,
    /// and this names the version the classes were derived from.
    #[test]
    fn the_tables_are_unicode_18() {
        assert_eq!(unicode_properties::UNICODE_VERSION, (18, 0, 0));
    }

    #[test]
    fn every_format_character_is_hidden_but_the_drawn_ones() {
        let mut format = 0;
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            if c.general_category() != GeneralCategory::Format {
                continue;
            }
            format += 1;
            let cp = c as u32;
            assert_eq!(class_of(c).is_none(), within(&DRAWN_FORMAT, cp), "U+{cp:04X}");
        }
        assert!(format > 150, "{format} characters of category Cf");
    }

    #[test]
    fn default_ignorable_code_points_are_hidden() {
        // Default_Ignorable_Code_Point, Unicode 18 (DerivedCoreProperties.txt), whole.
        let ignorable = [
            (0x00AD, 0x00AD),
            (0x034F, 0x034F),
            (0x061C, 0x061C),
            (0x115F, 0x1160),
            (0x17B4, 0x17B5),
            (0x180B, 0x180F),
            (0x200B, 0x200F),
            (0x202A, 0x202E),
            (0x2060, 0x206F),
            (0x3164, 0x3164),
            (0xFE00, 0xFE0F),
            (0xFEFF, 0xFEFF),
            (0xFFA0, 0xFFA0),
            (0xFFF0, 0xFFF8),
            (0x1BCA0, 0x1BCA3),
            (0x1D173, 0x1D17A),
            (0xE0000, 0xE0FFF),
        ];
        for (lo, hi) in ignorable {
            for cp in lo..=hi {
                let c = char::from_u32(cp).unwrap();
                assert!(class_of(c).is_some(), "U+{cp:04X}");
            }
        }
    }

    #[test]
    fn the_fillers_and_separators_have_classes_of_their_own() {
        for (c, class) in [
            ('\u{3164}', HiddenClass::Filler),
            ('\u{115F}', HiddenClass::Filler),
            ('\u{1160}', HiddenClass::Filler),
            ('\u{FFA0}', HiddenClass::Filler),
            ('\u{2800}', HiddenClass::Filler),
            ('\u{FFFC}', HiddenClass::Filler),
            ('\u{2028}', HiddenClass::Separator),
            ('\u{2029}', HiddenClass::Separator),
            ('\u{1D173}', HiddenClass::Format),
            ('\u{1BCA0}', HiddenClass::Format),
            ('\u{13430}', HiddenClass::Format),
            ('\u{1343F}', HiddenClass::Format),
        ] {
            assert_eq!(class_of(c), Some(class), "U+{:04X}", c as u32);
        }
        for c in ['a', 'é', '日', '한', '\u{0600}', '\u{06DD}', '\u{110BD}', '\u{2801}', ' ', '\u{00A0}'] {
            assert_eq!(class_of(c), None, "U+{:04X}", c as u32);
        }
    }
}
