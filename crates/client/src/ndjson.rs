//! Incremental newline-delimited JSON framing (Ollama), yielding one event per line so the
//! streaming driver times it like an SSE event: the line inherits the arrival instant of
//! the chunk that completed it.

use super::event::StreamEvent;

/// Accumulates bytes and yields complete, non-empty lines.
#[derive(Debug, Default)]
pub struct NdjsonParser {
    buf: Vec<u8>,
}

impl NdjsonParser {
    /// Feeds a chunk and appends every line it completes to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<StreamEvent>) {
        // What was held holds no newline: only the new bytes are searched.
        let mut start = 0;
        let mut from = self.buf.len();
        self.buf.extend_from_slice(bytes);
        while let Some(pos) = self.buf[from..].iter().position(|&b| b == b'\n') {
            let end = from + pos;
            emit(&self.buf[start..end], out);
            start = end + 1;
            from = start;
        }
        self.buf.drain(..start);
    }

    /// Bytes received but not yet forming a complete line.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Ends the stream: a last line without a newline is still delivered.
    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        let rest = std::mem::take(&mut self.buf);
        emit(&rest, out);
    }
}

fn emit(line: &[u8], out: &mut Vec<StreamEvent>) {
    let s = String::from_utf8_lossy(line);
    let s = s.trim();
    if !s.is_empty() {
        out.push(StreamEvent {
            event: None,
            data: s.to_owned(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_chunks_and_a_trailing_line_without_newline() {
        let mut p = NdjsonParser::default();
        let mut out = Vec::new();
        p.push(b"{\"a\":1}\n{\"b\"", &mut out);
        assert_eq!(out.len(), 1);
        p.push(b":2}\r\n\n{\"c\":3}", &mut out);
        assert_eq!(out.len(), 2);
        p.finish(&mut out);
        assert_eq!(out[2].data, "{\"c\":3}");
    }
}
