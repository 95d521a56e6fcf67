//! An upstream response's header fields as they came (`HeaderFields`): one copy of the head's
//! field lines and where each name and value lie in it, read by name. The few fields the
//! gateway reads (framing, `Content-Type`, `Mcp-Session-Id`) are looked up a handful of times
//! per response; a `HeaderMap` parsed every name, copied every value into an allocation of its
//! own and hashed each into a table, for every response (~3,000 instructions per forwarded
//! call). Names and values are validated by `httparse` as the head is read (RFC 9110 tokens;
//! values without control characters but HTAB), as `HeaderName`/`HeaderValue` would.

/// Where one field's name and value lie in the head's text.
#[derive(Debug, Clone, Copy)]
struct Field {
    name: (u32, u32),
    value: (u32, u32),
}

/// The bytes that record one `Field`: four little-endian `u32`s.
const FIELD: usize = 16;

/// A response head's fields, in the order they came.
#[derive(Debug, Default)]
pub struct HeaderFields {
    /// The head's text and then where each field lies in it (`FIELD` bytes each): one
    /// allocation per response, not one for the text and one for the list.
    data: Box<[u8]>,
    text_len: usize,
}

impl HeaderFields {
    /// The fields `httparse` read from `head` (the response's head, whose slices they are);
    /// `None` if one is not (which `httparse` never gives).
    pub(super) fn from_parsed(
        head: &[u8],
        parsed: &[httparse::Header<'_>],
    ) -> Option<HeaderFields> {
        let base = head.as_ptr() as usize;
        // Where `s` lies in `head` (an empty value may point anywhere: it is empty).
        let at = |s: &[u8]| -> Option<[u32; 2]> {
            if s.is_empty() {
                return Some([0, 0]);
            }
            let from = (s.as_ptr() as usize).checked_sub(base)?;
            let to = from.checked_add(s.len()).filter(|&to| to <= head.len())?;
            Some([u32::try_from(from).ok()?, u32::try_from(to).ok()?])
        };
        // At its exact length: the boxed slice is this allocation, not a copy of it.
        let mut data = Vec::with_capacity(head.len() + parsed.len() * FIELD);
        data.extend_from_slice(head);
        for h in parsed {
            let [a, b] = at(h.name.as_bytes())?;
            let [c, d] = at(h.value)?;
            for word in [a, b, c, d] {
                data.extend_from_slice(&word.to_le_bytes());
            }
        }
        Some(HeaderFields {
            data: data.into_boxed_slice(),
            text_len: head.len(),
        })
    }

    fn fields(&self) -> impl DoubleEndedIterator<Item = Field> + '_ {
        let word = |c: &[u8], i: usize| {
            c.get(i * 4..i * 4 + 4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map_or(0, u32::from_le_bytes)
        };
        self.data
            .get(self.text_len..)
            .unwrap_or_default()
            .chunks_exact(FIELD)
            .map(move |c| Field {
                name: (word(c, 0), word(c, 1)),
                value: (word(c, 2), word(c, 3)),
            })
    }

    fn slice(&self, (from, to): (u32, u32)) -> &[u8] {
        let text = self.data.get(..self.text_len).unwrap_or_default();
        text.get(from as usize..to as usize).unwrap_or_default()
    }

    /// Every value of the fields named `name` (compared ignoring ASCII case), in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl DoubleEndedIterator<Item = &'a [u8]> {
        self.fields()
            .filter(move |f| self.slice(f.name).eq_ignore_ascii_case(name.as_bytes()))
            .map(|f| self.slice(f.value))
    }

    /// The first value of the fields named `name`.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.fields()
            .find(|f| self.slice(f.name).eq_ignore_ascii_case(name.as_bytes()))
            .map(|f| self.slice(f.value))
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn len(&self) -> usize {
        self.data.len().saturating_sub(self.text_len) / FIELD
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fields(head: &[u8]) -> HeaderFields {
        let mut parsed = [httparse::EMPTY_HEADER; 16];
        let mut response = httparse::Response::new(&mut parsed);
        let httparse::Status::Complete(used) = response.parse(head).unwrap() else {
            panic!("a whole head");
        };
        HeaderFields::from_parsed(&head[..used], response.headers).unwrap()
    }

    #[test]
    fn fields_are_read_by_name_in_any_case_and_in_order() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nx-a: 1\r\nX-A:2\r\nMcp-Session-Id:  abc \r\n\r\nbody";
        let f = fields(head);
        assert_eq!(f.len(), 4);
        assert_eq!(f.get("content-type"), Some(&b"text/event-stream"[..]));
        assert_eq!(f.get("CONTENT-TYPE"), Some(&b"text/event-stream"[..]));
        assert_eq!(f.get_all("x-a").collect::<Vec<_>>(), [b"1", b"2"]);
        assert_eq!(f.get_all("x-a").next_back(), Some(&b"2"[..]));
        // httparse trims the whitespace around a value, as HeaderValue's parsers do.
        assert_eq!(f.get("mcp-session-id"), Some(&b"abc"[..]));
        assert!(f.contains("X-a") && !f.contains("x-b") && !f.contains("x-"));
        assert_eq!(f.get("content-length"), None);
    }

    #[test]
    fn a_head_without_fields_has_none() {
        let f = fields(b"HTTP/1.1 204 No Content\r\nX-Empty:\r\n\r\nbody");
        assert_eq!(f.get("x-empty"), Some(&b""[..]));
        let f = fields(b"HTTP/1.1 204 No Content\r\n\r\nbody");
        assert_eq!(f.len(), 0);
        assert_eq!(f.get("content-type"), None);
        assert_eq!(HeaderFields::default().get("x"), None);
    }
}
