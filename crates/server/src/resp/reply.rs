//! Reply encoding for RESP2 and RESP3.
//!
//! Handlers describe replies by their meaning (a map, a null, a double) and
//! the writer picks the wire form for the client's protocol version: RESP3
//! has its own types for these, RESP2 spells them as arrays, bulk strings
//! and null bulks, as Redis does.

/// Replies are appended here and sent once per batch of pipelined commands.
pub struct ReplyWriter {
    pub buf: Vec<u8>,
    resp3: bool,
}

impl ReplyWriter {
    pub fn new() -> ReplyWriter {
        ReplyWriter {
            buf: Vec::with_capacity(16 * 1024),
            resp3: false,
        }
    }

    pub fn set_resp3(&mut self, resp3: bool) {
        self.resp3 = resp3;
    }

    pub fn is_resp3(&self) -> bool {
        self.resp3
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    pub fn simple(&mut self, text: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(text.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An error line. `text` starts with its code (`ERR`, `WRONGTYPE`, ...);
    /// newlines would break the framing and are replaced by spaces.
    pub fn error(&mut self, text: &str) {
        self.buf.push(b'-');
        self.buf.extend(
            text.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn int(&mut self, value: i64) {
        self.header(b':', value);
    }

    pub fn bulk(&mut self, bytes: &[u8]) {
        self.header(b'$', bytes.len() as i64);
        self.buf.extend_from_slice(bytes);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An integer sent as a bulk string (GET of an integer-encoded value).
    pub fn bulk_int(&mut self, value: i64) {
        let mut digits = itoa::Buffer::new();
        self.bulk(digits.format(value).as_bytes());
    }

    /// A null: `_` in RESP3, a null bulk string in RESP2.
    pub fn null(&mut self) {
        self.buf
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"$-1\r\n" });
    }

    /// A null array (EXEC aborted by WATCH): `_` in RESP3, `*-1` in RESP2.
    pub fn null_array(&mut self) {
        self.buf
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"*-1\r\n" });
    }

    pub fn array(&mut self, len: usize) {
        self.header(b'*', len as i64);
    }

    /// A set: `~` in RESP3, an array in RESP2.
    pub fn set(&mut self, len: usize) {
        self.header(if self.resp3 { b'~' } else { b'*' }, len as i64);
    }

    /// A map of `len` pairs: `%` in RESP3, a flat array of 2×len in RESP2.
    pub fn map(&mut self, len: usize) {
        if self.resp3 {
            self.header(b'%', len as i64);
        } else {
            self.header(b'*', 2 * len as i64);
        }
    }

    /// A double: `,` in RESP3, a bulk string in RESP2 (as INCRBYFLOAT and
    /// ZSCORE reply in Redis).
    pub fn double(&mut self, value: f64) {
        self.simple_or_bulk(b',', super::redis_double(value).as_bytes());
    }

    /// A double already formatted (GEOPOS's coordinates): `,` in RESP3, a
    /// bulk string in RESP2.
    pub fn double_text(&mut self, text: &str) {
        self.simple_or_bulk(b',', text.as_bytes());
    }

    /// Text meant for people (INFO, CLIENT LIST): a verbatim string in
    /// RESP3, a bulk string in RESP2.
    pub fn verbatim(&mut self, text: &str) {
        if self.resp3 {
            self.header(b'=', text.len() as i64 + 4);
            self.buf.extend_from_slice(b"txt:");
            self.buf.extend_from_slice(text.as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text.as_bytes());
        }
    }

    /// A verbatim string of `format` (three bytes, Redis's `txt`, `mkd`):
    /// `=` in RESP3, a bulk string of `text` in RESP2.
    pub fn verbatim_as(&mut self, format: &[u8], text: &[u8]) {
        if self.resp3 && format.len() == 3 {
            self.header(b'=', text.len() as i64 + 4);
            self.buf.extend_from_slice(format);
            self.buf.push(b':');
            self.buf.extend_from_slice(text);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text);
        }
    }

    /// A number too big for an integer: `(` in RESP3, a bulk string in
    /// RESP2. `digits` must be an optional minus and decimal digits.
    pub fn big_number(&mut self, digits: &str) {
        self.simple_or_bulk(b'(', digits.as_bytes());
    }

    /// RESP3's one-line type `prefix` (a double, a big number), or a bulk
    /// string in RESP2.
    fn simple_or_bulk(&mut self, prefix: u8, text: &[u8]) {
        if self.resp3 {
            self.buf.push(prefix);
            self.buf.extend_from_slice(text);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text);
        }
    }

    /// Attributes of the next reply (`len` pairs follow, then the reply
    /// itself). RESP3 only: a RESP2 caller must leave them out.
    pub fn attribute(&mut self, len: usize) {
        debug_assert!(self.resp3, "attributes exist in RESP3 only");
        self.header(b'|', len as i64);
    }

    /// An out-of-band push of `len` elements. RESP3 only.
    pub fn push(&mut self, len: usize) {
        debug_assert!(self.resp3, "pushes exist in RESP3 only");
        self.header(b'>', len as i64);
    }

    pub fn boolean(&mut self, value: bool) {
        if self.resp3 {
            self.buf
                .extend_from_slice(if value { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.int(value as i64);
        }
    }

    fn header(&mut self, kind: u8, value: i64) {
        let mut digits = itoa::Buffer::new();
        self.buf.push(kind);
        self.buf.extend_from_slice(digits.format(value).as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
}

impl Default for ReplyWriter {
    fn default() -> Self {
        ReplyWriter::new()
    }
}

/// Formats a double the way Redis replies with one: integral values without
/// a fraction, `inf`/`-inf`, otherwise the shortest text that reads back to
/// the same value.
pub fn format_double(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    if value == value.trunc() && value.abs() < 1e17 {
        return format!("{}", value as i64);
    }
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(value);
    // ryu writes 1e20 as "1e20"; Redis prints "1e+20".
    match text.split_once('e') {
        Some((mantissa, exponent)) if !exponent.starts_with('-') => {
            format!("{mantissa}e+{exponent}")
        }
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp2_and_resp3_shapes() {
        let mut w = ReplyWriter::new();
        w.null();
        w.map(1);
        w.double(1.5);
        w.boolean(true);
        assert_eq!(w.buf, b"$-1\r\n*2\r\n$3\r\n1.5\r\n:1\r\n");
        let mut w = ReplyWriter::new();
        w.set_resp3(true);
        w.null();
        w.map(1);
        w.double(1.5);
        w.boolean(true);
        w.verbatim("hi");
        assert_eq!(w.buf, b"_\r\n%1\r\n,1.5\r\n#t\r\n=6\r\ntxt:hi\r\n");
    }

    #[test]
    fn errors_cannot_break_framing() {
        let mut w = ReplyWriter::new();
        w.error("ERR a\r\nb");
        assert_eq!(w.buf, b"-ERR a  b\r\n");
    }

    #[test]
    fn doubles_like_redis() {
        assert_eq!(format_double(3.0), "3");
        assert_eq!(format_double(10.5), "10.5");
        assert_eq!(format_double(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(format_double(f64::INFINITY), "inf");
        assert_eq!(format_double(-5e-324), "-5e-324");
    }
}
