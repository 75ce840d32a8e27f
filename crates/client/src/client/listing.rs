//! A list response read item by item as its bytes arrive: each of `items` is parsed on its
//! own and passed on, the rest of the object (`metadata` with its `resourceVersion` and
//! `continue`, which custom resources' lists send after the items) is kept and parsed at
//! the end. A listing of 50 000 objects never exists in memory as one tree of values.

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ListingError {
    #[error("a list item is not valid JSON: {0}")]
    Item(#[source] serde_json::Error),
    #[error("the list response is not valid JSON: {0}")]
    Envelope(#[source] serde_json::Error),
}

/// As the API client's errors: a response that could not be parsed.
impl From<ListingError> for kube::Error {
    fn from(error: ListingError) -> Self {
        match error {
            ListingError::Item(e) | ListingError::Envelope(e) => kube::Error::SerdeError(e),
        }
    }
}

/// Where the scanner is in the top-level object.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    /// Anywhere but inside `items`: bytes go to the envelope.
    Envelope,
    /// Between the items of `items` (after `[` or `,`).
    BetweenItems,
    /// Inside an item: bytes go to the item's buffer.
    Item,
}

/// A byte scanner of the top-level object: its depth and strings, and the key before a value.
pub(crate) struct ListSplitter {
    envelope: Vec<u8>,
    item: Vec<u8>,
    place: Place,
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The last string closed directly in the top-level object (a key, if a `:` follows).
    last_key: Vec<u8>,
    key: Vec<u8>,
    /// The key just read is `items` and the `:` after it was seen.
    items_next: bool,
}

impl Default for ListSplitter {
    fn default() -> Self {
        Self::new()
    }
}

impl ListSplitter {
    pub fn new() -> Self {
        Self {
            envelope: Vec::new(),
            item: Vec::new(),
            place: Place::Envelope,
            depth: 0,
            in_string: false,
            escaped: false,
            last_key: Vec::new(),
            key: Vec::new(),
            items_next: false,
        }
    }

    /// Scan the next bytes; each item completed in them is parsed and given to `found`.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        found: &mut impl FnMut(Value),
    ) -> Result<(), ListingError> {
        for &byte in bytes {
            if self.in_string {
                self.string_byte(byte);
                continue;
            }
            match (self.place, byte) {
                (Place::BetweenItems, b' ' | b'\n' | b'\r' | b'\t' | b',') => {}
                (Place::BetweenItems, b']') => self.end_items(),
                (Place::BetweenItems, _) => {
                    self.place = Place::Item;
                    self.scan_structure(byte);
                    self.item.push(byte);
                }
                (Place::Item, b',' | b']') if self.depth == 2 => {
                    // A scalar item ends here (structured ones end at their closing bracket).
                    self.finish_item(found)?;
                    if byte == b']' {
                        self.end_items();
                    } else {
                        self.place = Place::BetweenItems;
                    }
                }
                (Place::Item, _) => {
                    self.scan_structure(byte);
                    self.item.push(byte);
                    if self.depth == 2 && matches!(byte, b'}' | b']') {
                        self.finish_item(found)?;
                        self.place = Place::BetweenItems;
                    }
                }
                (Place::Envelope, b'[') if self.depth == 1 && self.items_next => {
                    self.items_next = false;
                    self.depth += 1;
                    self.place = Place::BetweenItems;
                }
                (Place::Envelope, _) => {
                    if self.depth == 1 && byte == b':' {
                        self.items_next = self.last_key == b"items";
                    } else if !byte.is_ascii_whitespace() {
                        self.items_next = false;
                    }
                    if byte == b'"' && self.depth == 1 {
                        self.key.clear();
                    }
                    self.scan_structure(byte);
                    self.envelope.push(byte);
                }
            }
        }
        Ok(())
    }

    /// The top-level object without its items (`"items": []`).
    pub fn finish(self) -> Result<Value, ListingError> {
        serde_json::from_slice(&self.envelope).map_err(ListingError::Envelope)
    }

    fn string_byte(&mut self, byte: u8) {
        let top_level = self.depth == 1 && self.place == Place::Envelope;
        match self.place {
            Place::Item => self.item.push(byte),
            _ => self.envelope.push(byte),
        }
        if self.escaped {
            self.escaped = false;
        } else if byte == b'\\' {
            self.escaped = true;
        } else if byte == b'"' {
            self.in_string = false;
            if top_level {
                self.last_key = std::mem::take(&mut self.key);
            }
            return;
        }
        if top_level {
            self.key.push(byte);
        }
    }

    fn end_items(&mut self) {
        self.depth -= 1;
        self.place = Place::Envelope;
        self.envelope.extend_from_slice(b"[]");
    }

    /// Depth and strings, outside of strings.
    fn scan_structure(&mut self, byte: u8) {
        match byte {
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b'"' => self.in_string = true,
            _ => {}
        }
    }

    fn finish_item(&mut self, found: &mut impl FnMut(Value)) -> Result<(), ListingError> {
        let text = std::mem::take(&mut self.item);
        let trimmed = text.trim_ascii();
        if !trimmed.is_empty() {
            found(serde_json::from_slice(trimmed).map_err(ListingError::Item)?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn split(text: &str, chunk: usize) -> (Vec<Value>, Value) {
        let mut splitter = ListSplitter::new();
        let mut items = Vec::new();
        for part in text.as_bytes().chunks(chunk) {
            splitter.feed(part, &mut |item| items.push(item)).unwrap();
        }
        (items, splitter.finish().unwrap())
    }

    #[test]
    fn items_come_one_by_one_and_the_rest_at_the_end() {
        let list = json!({
            "apiVersion": "demo.kopf.dev/v1",
            "items": [
                {"metadata": {"name": "a", "annotations": {"x": "{[\"]},"}}, "spec": {"list": [1, [2], {}]}},
                {"metadata": {"name": "b\\\"c"}, "items": [{"nested": "items"}]},
            ],
            "kind": "GreetingList",
            "metadata": {"resourceVersion": "42", "continue": "abc"},
        });
        for text in [
            list.to_string(),
            serde_json::to_string_pretty(&list).unwrap(),
        ] {
            for chunk in [1, 2, 3, 7, 64, 100_000] {
                let (items, rest) = split(&text, chunk);
                assert_eq!(
                    items,
                    list["items"].as_array().unwrap().clone(),
                    "chunk {chunk}"
                );
                let mut expected = list.clone();
                expected["items"] = json!([]);
                assert_eq!(rest, expected, "chunk {chunk}");
            }
        }
    }

    #[test]
    fn metadata_before_the_items_and_empty_lists() {
        let (items, rest) = split(
            r#"{"kind":"PodList","metadata":{"resourceVersion":"7"},"items":[]}"#,
            5,
        );
        assert!(items.is_empty());
        assert_eq!(rest["metadata"]["resourceVersion"], "7");
        let (items, rest) = split(
            r#"{"kind":"X","items":null,"metadata":{"resourceVersion":"8"}}"#,
            3,
        );
        assert!(items.is_empty());
        assert_eq!(rest["items"], Value::Null);
        assert_eq!(rest["metadata"]["resourceVersion"], "8");
        let (items, _) = split(r#"{"items": [ "a,]" , 1 ,[2, [3]], true ]}"#, 2);
        assert_eq!(
            items,
            vec![json!("a,]"), json!(1), json!([2, [3]]), json!(true)]
        );
    }

    #[test]
    fn broken_json_is_an_error() {
        let mut splitter = ListSplitter::new();
        let result = splitter.feed(br#"{"items":[{"a":1,}]}"#, &mut |_| {});
        assert!(matches!(result, Err(ListingError::Item(_))));
        let mut splitter = ListSplitter::new();
        splitter
            .feed(br#"{"items":[], "metadata": {"#, &mut |_| {})
            .unwrap();
        assert!(splitter.finish().is_err());
    }
}
