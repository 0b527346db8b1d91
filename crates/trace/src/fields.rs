//! Typed reads of JSON fields, each failure an error naming file, line and field.

use std::path::Path;

use serde_json::{Map, Value};

use crate::request::TraceError;

/// Where a value was read: the file and 1-based line, and a prefix for field paths
/// (`requests[3].` in a Weka file).
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub path: &'a Path,
    pub line: u64,
    pub prefix: &'a str,
}

impl At<'_> {
    /// An `Invalid` error at this place.
    pub fn err(&self, field: &str, message: impl Into<String>) -> TraceError {
        TraceError::Invalid {
            path: self.path.to_owned(),
            line: self.line,
            field: format!("{}{field}", self.prefix),
            message: message.into(),
        }
    }

    /// A field that must be present.
    pub fn get<'v>(&self, obj: &'v Map<String, Value>, key: &str) -> Result<&'v Value, TraceError> {
        obj.get(key).ok_or_else(|| self.err(key, "missing"))
    }

    /// A required token count: a whole number, 0 or more.
    pub fn count(&self, obj: &Map<String, Value>, key: &str) -> Result<u64, TraceError> {
        self.count_value(self.get(obj, key)?, key)
    }

    /// An optional token count (absent or null is `None`).
    pub fn opt_count(
        &self,
        obj: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<u64>, TraceError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => self.count_value(v, key).map(Some),
        }
    }

    /// A value that must be a whole number, 0 or more (`12.0` is accepted as 12).
    pub fn count_value(&self, v: &Value, key: &str) -> Result<u64, TraceError> {
        if let Some(n) = v.as_u64() {
            return Ok(n);
        }
        match v.as_f64() {
            Some(x) if x < 0.0 => Err(self.err(key, format!("negative ({v}); must be 0 or more"))),
            Some(x) if x.fract() == 0.0 && x <= u64::MAX as f64 => Ok(x as u64),
            Some(_) => Err(self.err(key, format!("not a whole number ({v})"))),
            None => Err(self.err(key, format!("not a number ({v})"))),
        }
    }

    /// An optional time or duration: a finite number, 0 or more.
    pub fn opt_time(&self, obj: &Map<String, Value>, key: &str) -> Result<Option<f64>, TraceError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x >= 0.0 => Ok(Some(x)),
                Some(_) => Err(self.err(key, format!("negative ({v}); must be 0 or more"))),
                None => Err(self.err(key, format!("not a number ({v})"))),
            },
        }
    }

    /// An optional list of block ids (whole numbers, 0 or more).
    pub fn opt_ids(
        &self,
        obj: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<Vec<u64>>, TraceError> {
        let arr = match obj.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(a)) => a,
            Some(v) => return Err(self.err(key, format!("not a list of ids ({})", kind(v)))),
        };
        let mut ids = Vec::with_capacity(arr.len());
        for (i, v) in arr.iter().enumerate() {
            match v.as_u64() {
                Some(id) => ids.push(id),
                None => {
                    return Err(self.err(
                        &format!("{key}[{i}]"),
                        format!("not a block id ({v}); ids are whole numbers, 0 or more"),
                    ))
                }
            }
        }
        Ok(Some(ids))
    }

    /// An optional string (a number is taken as its text: session ids are either).
    pub fn opt_name(
        &self,
        obj: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<String>, TraceError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(v) => Err(self.err(key, format!("not a name ({})", kind(v)))),
        }
    }
}

/// A JSON value's kind, for messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A JSON object from one line of a JSONL trace; a line that does not parse is an error
/// naming the line (a last line cut short is called truncated).
pub(crate) fn object_line(
    at: At<'_>,
    text: &str,
    last_without_newline: bool,
) -> Result<Map<String, Value>, TraceError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(v) => Err(at.err("(line)", format!("not a JSON object ({})", kind(&v)))),
        Err(e) if e.is_eof() || last_without_newline => Err(at.err(
            "(line)",
            format!("truncated: the line ends before its JSON does ({e})"),
        )),
        Err(e) => Err(at.err("(line)", format!("not valid JSON ({e})"))),
    }
}

/// `ceil(a / b)` for token counts.
pub(crate) fn ceil_div(a: u64, b: u64) -> u64 {
    a / b + u64::from(a % b != 0)
}
