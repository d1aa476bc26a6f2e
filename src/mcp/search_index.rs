//! The ranking behind `search_tools` (`docs/mcp.md`, "Search instead of a thousand tools"):
//! BM25F over each tool's name, title and description, built once per catalogue and kept in it,
//! so a search costs a walk of the postings of its query's words, never a pass over every
//! definition.
//!
//! Hand-written rather than the `bm25` crate: tool names are identifiers (`crm__deleteContact`),
//! which its default tokenizer does not split, while it brings stemming, stop-word and
//! Unicode-segmentation dependencies; and its engine ranks over every document, where the
//! gateway must drop, per caller and before ranking, the tools its rules hide
//! (`dispatch/search.rs`). What is left of BM25 is the few lines of [`SearchIndex::scores`].

use serde_json::Value;
use std::collections::HashMap;

/// BM25's term-frequency saturation and length normalisation, at the values most engines use.
const K1: f32 = 1.2;
const B: f32 = 0.75;
/// How much a word counts in each field (BM25F): a word of the name says most of what a tool
/// does, its title next.
const NAME_WEIGHT: f32 = 3.0;
const TITLE_WEIGHT: f32 = 2.0;
const DESCRIPTION_WEIGHT: f32 = 1.0;

/// The tools of one catalogue, indexed by their position in its list.
#[derive(Debug, Default)]
pub(crate) struct SearchIndex {
    /// Word -> (tool, its weighted frequency in the tool), tools ascending.
    postings: HashMap<Box<str>, Vec<(u32, f32)>>,
    /// Each tool's weighted length, in words.
    lengths: Vec<f32>,
    average: f32,
    /// A tool's name at the gateway -> its position.
    positions: HashMap<Box<str>, u32>,
}

impl SearchIndex {
    /// The index of a catalogue's `tools` (their definitions as clients see them: shaped,
    /// cleaned of hidden text).
    pub(crate) fn build(tools: &[Value]) -> SearchIndex {
        let mut index = SearchIndex { lengths: Vec::with_capacity(tools.len()), ..SearchIndex::default() };
        let mut counts: HashMap<String, f32> = HashMap::new();
        for (doc, tool) in tools.iter().enumerate() {
            let doc = doc as u32;
            let text = |key: &str| tool.get(key).and_then(Value::as_str).unwrap_or_default();
            let name = text("name");
            let title = tool.get("title").or_else(|| tool.pointer("/annotations/title")).and_then(Value::as_str);
            counts.clear();
            let mut length = 0.0;
            for (field, weight) in [
                (name, NAME_WEIGHT),
                (title.unwrap_or_default(), TITLE_WEIGHT),
                (text("description"), DESCRIPTION_WEIGHT),
            ] {
                words(field, |w| {
                    *counts.entry(w).or_default() += weight;
                    length += weight;
                });
            }
            for (word, tf) in counts.drain() {
                index.postings.entry(word.into_boxed_str()).or_default().push((doc, tf));
            }
            index.lengths.push(length);
            index.positions.insert(name.into(), doc);
        }
        let total: f32 = index.lengths.iter().sum();
        index.average = if tools.is_empty() { 0.0 } else { total / tools.len() as f32 };
        index
    }

    /// The position of the tool named `name` at the gateway.
    pub(crate) fn position(&self, name: &str) -> Option<u32> {
        self.positions.get(name).copied()
    }

    /// The tools that match a word of `query`, each with its BM25F score (above 0), in no
    /// particular order.
    pub(crate) fn scores(&self, query: &str) -> Vec<(u32, f32)> {
        let mut terms = Vec::new();
        words(query, |w| terms.push(w));
        terms.sort_unstable();
        terms.dedup();
        let n = self.lengths.len() as f32;
        let mut scores: HashMap<u32, f32> = HashMap::new();
        for term in &terms {
            let Some(postings) = self.postings.get(term.as_str()) else { continue };
            let idf = (1.0 + (n - postings.len() as f32 + 0.5) / (postings.len() as f32 + 0.5)).ln();
            for &(doc, tf) in postings {
                let norm = K1 * (1.0 - B + B * self.lengths[doc as usize] / self.average.max(f32::EPSILON));
                *scores.entry(doc).or_default() += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        scores.into_iter().filter(|(_, s)| *s > 0.0).collect()
    }
}

/// The best `limit` of `hits`, best first; equal scores keep the catalogue's order.
pub(crate) fn ranked(mut hits: Vec<(u32, f32)>, limit: usize) -> Vec<u32> {
    hits.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    hits.into_iter().take(limit).map(|(doc, _)| doc).collect()
}

/// The words of `text`, lower-cased, each given to `out`: split at anything but letters and
/// digits and where a lower-case letter meets an upper-case one (`deleteContact`), and a plural
/// `s` dropped (`contacts` finds `contact`).
fn words(text: &str, mut out: impl FnMut(String)) {
    let mut word = String::new();
    let mut previous_lower = false;
    let mut emit = |word: &mut String| {
        if word.is_empty() {
            return;
        }
        if word.len() > 3 && word.ends_with('s') && !word.ends_with("ss") {
            word.pop();
        }
        out(std::mem::take(word));
    };
    for c in text.chars() {
        if !c.is_alphanumeric() {
            emit(&mut word);
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower {
            emit(&mut word);
        }
        previous_lower = c.is_lowercase() || c.is_numeric();
        word.extend(c.to_lowercase());
    }
    emit(&mut word);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn all_words(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        words(text, |w| out.push(w));
        out
    }

    #[test]
    fn identifiers_and_text_split_into_words() {
        assert_eq!(all_words("crm__deleteContact"), ["crm", "delete", "contact"]);
        assert_eq!(all_words("Sends E-mails to contacts."), ["send", "e", "mail", "to", "contact"]);
        assert_eq!(all_words("app07__get_weather_v2"), ["app07", "get", "weather", "v2"]);
        assert_eq!(all_words("address class"), ["address", "class"], "a double s is not a plural");
        assert!(all_words("  -- ").is_empty());
    }

    fn tool(name: &str, title: &str, description: &str) -> Value {
        json!({ "name": name, "title": title, "description": description, "inputSchema": { "type": "object" } })
    }

    #[test]
    fn the_name_weighs_most_and_rare_words_more_than_common_ones() {
        let tools = vec![
            tool("crm__list_contacts", "List contacts", "Lists the contacts of the CRM."),
            tool("crm__delete_contact", "Delete a contact", "Deletes one contact for good."),
            tool("mail__send", "Send mail", "Sends a mail; mentions delete once."),
            tool("files__delete", "", "Removes a file."),
        ];
        let index = SearchIndex::build(&tools);
        let ranked_names = |q: &str, limit| -> Vec<&str> {
            ranked(index.scores(q), limit).into_iter().map(|d| tools[d as usize]["name"].as_str().unwrap()).collect()
        };
        assert_eq!(ranked_names("delete contact", 10)[0], "crm__delete_contact");
        let mut first_two = ranked_names("delete", 10)[..2].to_vec();
        first_two.sort_unstable();
        assert_eq!(first_two, ["crm__delete_contact", "files__delete"], "the names that say it");
        assert_eq!(ranked_names("delete", 10).last(), Some(&"mail__send"), "only the description mentions it");
        assert_eq!(ranked_names("contacts", 1), ["crm__list_contacts"]);
        assert!(ranked_names("weather", 10).is_empty());
        assert!(ranked_names("", 10).is_empty());
        assert_eq!(index.position("mail__send"), Some(2));
        assert_eq!(index.position("nope"), None);
    }

    #[test]
    fn equal_scores_keep_the_catalogues_order() {
        let tools: Vec<Value> = (0..20).map(|i| tool(&format!("app{i:02}__ping"), "", "Answers pong.")).collect();
        let index = SearchIndex::build(&tools);
        assert_eq!(ranked(index.scores("ping"), 3), [0, 1, 2]);
        assert!(SearchIndex::build(&[]).scores("ping").is_empty());
    }
}
