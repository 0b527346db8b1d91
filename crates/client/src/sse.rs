//! Incremental Server-Sent Events parser.
//!
//! Hand-written rather than taken from an SSE crate because the measuring path needs the
//! arrival instant of the bytes that completed each event: the caller timestamps every chunk
//! as it comes off the socket and feeds it here; events completed by that chunk inherit it.

use super::event::StreamEvent;

/// Accumulates bytes and yields complete events; tolerant of CRLF, comments and split UTF-8.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// A parser with nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk of bytes and appends every event it completes to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<StreamEvent>) {
        // What was held holds no newline: only the new bytes are searched, so a line that
        // never ends costs its length once, not once per chunk.
        let mut from = self.buf.len();
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(pos) = self.buf[from..].iter().position(|&b| b == b'\n') {
            let end = from + pos;
            let mut line = &self.buf[start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = String::from_utf8_lossy(line).into_owned();
            self.line(&line, out);
            start = end + 1;
            from = start;
        }
        self.buf.drain(..start);
    }

    /// Ends the stream: a last event not followed by a blank line is still delivered.
    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let line = String::from_utf8_lossy(&rest)
                .trim_end_matches('\r')
                .to_owned();
            self.line(&line, out);
        }
        self.dispatch(out);
    }

    /// Bytes held for the event being read: its lines so far and a line not yet complete.
    pub fn pending(&self) -> usize {
        self.buf.len() + self.data.as_ref().map_or(0, String::len)
    }

    fn line(&mut self, line: &str, out: &mut Vec<StreamEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            return; // keep-alive comment (llama.cpp, TGI)
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "event" => self.event = Some(value.to_owned()),
            // Old llama.cpp builds sent `error: {...}` lines with HTTP 200.
            "error" => {
                self.event = Some("error".to_owned());
                self.data = Some(value.to_owned());
            }
            _ => {} // id, retry and unknown fields carry nothing we measure
        }
    }

    fn dispatch(&mut self, out: &mut Vec<StreamEvent>) {
        let event = self.event.take();
        if let Some(data) = self.data.take() {
            out.push(StreamEvent { event, data });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<StreamEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.push(c, &mut out);
        }
        p.finish(&mut out);
        out
    }

    #[test]
    fn splits_events_on_blank_lines() {
        let ev = parse_all(&[b"data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n"]);
        let data: Vec<_> = ev.iter().map(|e| e.data.as_str()).collect();
        assert_eq!(data, ["{\"a\":1}", "{\"a\":2}", "[DONE]"]);
    }

    #[test]
    fn handles_crlf_comments_and_event_lines() {
        let ev = parse_all(&[b": ping\r\n\r\nevent: error\r\ndata: {\"x\":1}\r\n\r\n"]);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].event.as_deref(), Some("error"));
        assert_eq!(ev[0].data, "{\"x\":1}");
    }

    #[test]
    fn joins_multiline_data_and_accepts_no_space() {
        let ev = parse_all(&[b"data:a\ndata: b\n\n"]);
        assert_eq!(ev[0].data, "a\nb");
    }

    #[test]
    fn reassembles_events_split_across_chunks_and_utf8() {
        let text = "data: {\"content\":\"é\"}\n\n".as_bytes();
        // Split inside the two-byte 'é'.
        let cut = text.iter().position(|&b| b == 0xC3).unwrap() + 1;
        let ev = parse_all(&[&text[..cut], &text[cut..]]);
        assert_eq!(ev[0].data, "{\"content\":\"é\"}");
    }

    #[test]
    fn delivers_a_final_event_without_trailing_blank_line() {
        let ev = parse_all(&[b"data: last"]);
        assert_eq!(ev[0].data, "last");
    }

    #[test]
    fn old_llamacpp_error_line_becomes_error_event() {
        let ev = parse_all(&[b"error: {\"message\":\"boom\"}\n\n"]);
        assert_eq!(ev[0].event.as_deref(), Some("error"));
        assert!(ev[0].data.contains("boom"));
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_chunking_does_not_matter(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
            cut in 0usize..512,
        ) {
            let cut = cut.min(bytes.len());
            let whole = parse_all(&[&bytes]);
            let split = parse_all(&[&bytes[..cut], &bytes[cut..]]);
            proptest::prop_assert_eq!(whole, split);
        }
    }
}
