//! The request parser: RESP multibulk arrays and inline commands, with
//! Redis's limits and error texts.
//!
//! The parser is resumable. A command that arrives in pieces is not parsed
//! again from its start on every read: the parser remembers how many
//! arguments it has found and where the next one begins, so a 1 M-argument
//! `MSET` trickling in over many reads costs linear time, not quadratic.
//! Positions are relative to the start of the current command; the caller
//! passes the buffer from that start each time and drops the bytes of
//! finished commands between calls.

use std::ops::Range;

/// Longest inline command, and longest `*N`/`$N` header line (Redis's
/// `PROTO_INLINE_MAX_SIZE`).
pub const INLINE_MAX_BYTES: usize = 64 * 1024;
/// Most arguments one command may have. Redis allows `INT_MAX`; we bound it
/// so a header cannot make the server plan for billions of arguments.
pub const MAX_ARGS: usize = 1024 * 1024;
/// Default largest bulk string (Redis's `proto-max-bulk-len`).
pub const DEFAULT_MAX_BULK_BYTES: usize = 512 * 1024 * 1024;

/// A malformed request. The connection is closed after the error is sent,
/// because the parser cannot know where the next command starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    #[error("Protocol error: expected '$', got '{}'", char::from(*.0))]
    ExpectedDollar(u8),
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkHeader,
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkHeader,
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
}

/// What one call to [`RequestParser::parse`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// More bytes are needed; at least `needed` in total from the command's
    /// start (a hint for reserving buffer space, exact for bulk bodies).
    Incomplete { needed: usize },
    /// Bytes that carry no command (an empty line, `*0`): drop `consumed`.
    Skip { consumed: usize },
    /// A whole command of `consumed` bytes; read it with `args`.
    Command { consumed: usize },
}

#[derive(Default)]
pub struct RequestParser {
    max_bulk: usize,
    /// The arguments found so far, as ranges of the command's bytes
    /// (multibulk) or of `inline` (inline commands, which need unescaping).
    ranges: Vec<Range<usize>>,
    inline: Vec<u8>,
    is_inline: bool,
    /// A multibulk in progress: arguments announced, and where the next
    /// argument's header starts.
    pending: Option<Pending>,
}

#[derive(Clone, Copy)]
struct Pending {
    expected: usize,
    next: usize,
}

/// The arguments of one parsed command, borrowed from the read buffer.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    base: &'a [u8],
    ranges: &'a [Range<usize>],
}

impl<'a> Args<'a> {
    pub fn new(base: &'a [u8], ranges: &'a [Range<usize>]) -> Args<'a> {
        Args { base, ranges }
    }
    pub fn len(&self) -> usize {
        self.ranges.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
    /// Argument `i`. Panics when out of range: command handlers check arity
    /// before they index.
    pub fn get(&self, i: usize) -> &'a [u8] {
        &self.base[self.ranges[i].clone()]
    }
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        let base = self.base;
        self.ranges.iter().map(move |r| &base[r.clone()])
    }
    /// The arguments from `start` on.
    pub fn from(&self, start: usize) -> Args<'a> {
        Args {
            base: self.base,
            ranges: &self.ranges[start.min(self.ranges.len())..],
        }
    }
    /// Copies the arguments out, for commands queued by `MULTI`.
    pub fn to_owned(&self) -> OwnedArgs {
        let mut bytes = Vec::with_capacity(self.ranges.iter().map(|r| r.len()).sum());
        let mut ranges = Vec::with_capacity(self.ranges.len());
        for arg in self.iter() {
            let start = bytes.len();
            bytes.extend_from_slice(arg);
            ranges.push(start..bytes.len());
        }
        OwnedArgs { bytes, ranges }
    }
}

/// A command's arguments held by the client (a `MULTI` queue entry).
#[derive(Clone, Debug)]
pub struct OwnedArgs {
    bytes: Vec<u8>,
    ranges: Vec<Range<usize>>,
}

impl OwnedArgs {
    pub fn args(&self) -> Args<'_> {
        Args::new(&self.bytes, &self.ranges)
    }
    /// Room for `count` arguments.
    pub fn with_capacity(count: usize) -> OwnedArgs {
        OwnedArgs {
            bytes: Vec::with_capacity(count * 16),
            ranges: Vec::with_capacity(count),
        }
    }

    /// Appends an argument.
    pub fn push(&mut self, part: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(part);
        self.ranges.push(start..self.bytes.len());
    }

    pub fn from_slices(parts: &[&[u8]]) -> OwnedArgs {
        let mut bytes = Vec::new();
        let mut ranges = Vec::with_capacity(parts.len());
        for part in parts {
            let start = bytes.len();
            bytes.extend_from_slice(part);
            ranges.push(start..bytes.len());
        }
        OwnedArgs { bytes, ranges }
    }
}

impl RequestParser {
    pub fn new(max_bulk: usize) -> RequestParser {
        RequestParser {
            max_bulk,
            ..RequestParser::default()
        }
    }

    pub fn set_max_bulk(&mut self, max_bulk: usize) {
        self.max_bulk = max_bulk;
    }

    /// The arguments of the command the last `parse` returned, given the
    /// same buffer it was given.
    pub fn args<'a>(&'a self, buf: &'a [u8]) -> Args<'a> {
        if self.is_inline {
            Args::new(&self.inline, &self.ranges)
        } else {
            Args::new(buf, &self.ranges)
        }
    }

    /// Parses from `buf`, which starts at the current command's first byte.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Step, ProtocolError> {
        if self.pending.is_none() {
            self.ranges.clear();
            self.is_inline = false;
            match buf.first() {
                None => return Ok(Step::Incomplete { needed: 1 }),
                Some(b'*') => {}
                Some(_) => return self.parse_inline(buf),
            }
            let Some((line, after)) = line_at(buf, 0) else {
                if buf.len() > INLINE_MAX_BYTES {
                    return Err(ProtocolError::TooBigMultibulkHeader);
                }
                return Ok(Step::Incomplete {
                    needed: buf.len() + 1,
                });
            };
            let count = parse_int(&line[1..]).ok_or(ProtocolError::InvalidMultibulkLength)?;
            if count > MAX_ARGS as i64 {
                return Err(ProtocolError::InvalidMultibulkLength);
            }
            if count <= 0 {
                return Ok(Step::Skip { consumed: after });
            }
            self.pending = Some(Pending {
                expected: count as usize,
                next: after,
            });
        }
        self.parse_bulks(buf)
    }

    fn parse_bulks(&mut self, buf: &[u8]) -> Result<Step, ProtocolError> {
        let mut pending = self.pending.expect("a multibulk in progress");
        while self.ranges.len() < pending.expected {
            let at = pending.next;
            let Some(&first) = buf.get(at) else {
                self.pending = Some(pending);
                return Ok(Step::Incomplete { needed: at + 1 });
            };
            if first != b'$' {
                self.pending = None;
                return Err(ProtocolError::ExpectedDollar(first));
            }
            let Some((line, body)) = line_at(buf, at) else {
                self.pending = Some(pending);
                if buf.len() - at > INLINE_MAX_BYTES {
                    self.pending = None;
                    return Err(ProtocolError::TooBigBulkHeader);
                }
                return Ok(Step::Incomplete {
                    needed: buf.len() + 1,
                });
            };
            let len = match parse_int(&line[1..]) {
                Some(len) if len >= 0 && len as u64 <= self.max_bulk as u64 => len as usize,
                _ => {
                    self.pending = None;
                    return Err(ProtocolError::InvalidBulkLength);
                }
            };
            // Like Redis, the two bytes after the body are skipped unread.
            let end = body + len + 2;
            if buf.len() < end {
                self.pending = Some(pending);
                return Ok(Step::Incomplete { needed: end });
            }
            self.ranges.push(body..body + len);
            pending.next = end;
        }
        self.pending = None;
        Ok(Step::Command {
            consumed: pending.next,
        })
    }

    fn parse_inline(&mut self, buf: &[u8]) -> Result<Step, ProtocolError> {
        let Some(newline) = buf.iter().position(|&b| b == b'\n') else {
            if buf.len() > INLINE_MAX_BYTES {
                return Err(ProtocolError::TooBigInline);
            }
            return Ok(Step::Incomplete {
                needed: buf.len() + 1,
            });
        };
        let mut line = &buf[..newline];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        self.inline.clear();
        split_args(line, &mut self.inline, &mut self.ranges)?;
        self.is_inline = true;
        let consumed = newline + 1;
        if self.ranges.is_empty() {
            Ok(Step::Skip { consumed })
        } else {
            Ok(Step::Command { consumed })
        }
    }
}

/// The line starting at `at` (without its CRLF) and the offset after it.
fn line_at(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = &buf[at..];
    let cr = memchr_cr(rest)?;
    if rest.get(cr + 1)? != &b'\n' {
        // A lone CR inside a header: let the number parser reject it.
        return Some((&rest[..cr + 1], at + cr + 1));
    }
    Some((&rest[..cr], at + cr + 2))
}

fn memchr_cr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\r')
}

/// Redis's integer syntax lives with the stored integers (the keyspace).
pub use engram_keyspace::value::parse_int;

/// Splits an inline command like Redis's `sdssplitargs`: words separated by
/// blanks, "double quotes" with C escapes and \xHH, 'single quotes' with \'.
fn split_args(
    line: &[u8],
    out: &mut Vec<u8>,
    ranges: &mut Vec<Range<usize>>,
) -> Result<(), ProtocolError> {
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            return Ok(());
        }
        if ranges.len() >= MAX_ARGS {
            return Err(ProtocolError::InvalidMultibulkLength);
        }
        let start = out.len();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            let c = line.get(i).copied();
            if in_double {
                match c {
                    None => return Err(ProtocolError::UnbalancedQuotes),
                    Some(b'\\')
                        if line.get(i + 1) == Some(&b'x')
                            && line.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
                            && line.get(i + 3).is_some_and(u8::is_ascii_hexdigit) =>
                    {
                        out.push(hex(line[i + 2]) * 16 + hex(line[i + 3]));
                        i += 3;
                    }
                    Some(b'\\') if i + 1 < line.len() => {
                        i += 1;
                        out.push(match line[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 8,
                            b'a' => 7,
                            other => other,
                        });
                    }
                    Some(b'"') => {
                        // The closing quote must be followed by a blank.
                        if line.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                            return Err(ProtocolError::UnbalancedQuotes);
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => out.push(other),
                }
            } else if in_single {
                match c {
                    None => return Err(ProtocolError::UnbalancedQuotes),
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        out.push(b'\'');
                        i += 1;
                    }
                    Some(b'\'') => {
                        if line.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                            return Err(ProtocolError::UnbalancedQuotes);
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => out.push(other),
                }
            } else {
                match c {
                    None => break,
                    Some(b) if b.is_ascii_whitespace() => break,
                    Some(b'"') => in_double = true,
                    Some(b'\'') => in_single = true,
                    Some(other) => out.push(other),
                }
            }
            i += 1;
        }
        ranges.push(start..out.len());
    }
}

/// Splits one line into words the way inline commands are split (for
/// configuration files, which Redis reads with the same rules).
pub fn split_words(line: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
    let mut bytes = Vec::new();
    let mut ranges = Vec::new();
    split_args(line, &mut bytes, &mut ranges)?;
    Ok(ranges.into_iter().map(|r| bytes[r].to_vec()).collect())
}

fn hex(digit: u8) -> u8 {
    (digit as char).to_digit(16).expect("checked hex digit") as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut parser = RequestParser::new(DEFAULT_MAX_BULK_BYTES);
        let mut at = 0;
        let mut commands = Vec::new();
        loop {
            match parser.parse(&input[at..])? {
                Step::Incomplete { .. } => return Ok(commands),
                Step::Skip { consumed } => at += consumed,
                Step::Command { consumed } => {
                    let args = parser.args(&input[at..]);
                    commands.push(args.iter().map(<[u8]>::to_vec).collect());
                    at += consumed;
                }
            }
        }
    }

    #[test]
    fn multibulk_and_pipelining() {
        let got = parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n").unwrap();
        assert_eq!(
            got,
            vec![vec![b"GET".to_vec(), b"k".to_vec()], vec![b"PING".to_vec()]]
        );
    }

    #[test]
    fn inline_with_quotes_and_escapes() {
        let got = parse_all(b"set k \"a\\x41\\n b\" 'it\\'s'\r\n\r\nPING\n").unwrap();
        assert_eq!(
            got,
            vec![
                vec![
                    b"set".to_vec(),
                    b"k".to_vec(),
                    b"aA\n b".to_vec(),
                    b"it's".to_vec()
                ],
                vec![b"PING".to_vec()]
            ]
        );
    }

    #[test]
    fn resumes_across_reads() {
        let whole = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n";
        let mut parser = RequestParser::new(DEFAULT_MAX_BULK_BYTES);
        for cut in 0..whole.len() {
            assert!(matches!(
                parser.parse(&whole[..cut]).unwrap(),
                Step::Incomplete { .. }
            ));
        }
        assert_eq!(
            parser.parse(whole).unwrap(),
            Step::Command {
                consumed: whole.len()
            }
        );
        assert_eq!(parser.args(whole).get(2), b"hello");
    }

    #[test]
    fn errors_match_redis() {
        let cases: &[(&[u8], &str)] = &[
            (b"*x\r\n", "Protocol error: invalid multibulk length"),
            (b"*2\r\n+foo\r\n", "Protocol error: expected '$', got '+'"),
            (b"*1\r\n$-5\r\n", "Protocol error: invalid bulk length"),
            (
                b"*1\r\n$999999999999\r\n",
                "Protocol error: invalid bulk length",
            ),
            (b"*1\r\n$1x\r\n", "Protocol error: invalid bulk length"),
            (
                b"set \"k\r\n",
                "Protocol error: unbalanced quotes in request",
            ),
            (
                b"set \"k\"x\r\n",
                "Protocol error: unbalanced quotes in request",
            ),
        ];
        for (input, text) in cases {
            let err = parse_all(input).unwrap_err();
            assert_eq!(
                err.to_string(),
                *text,
                "input {:?}",
                String::from_utf8_lossy(input)
            );
        }
        let long = vec![b'a'; INLINE_MAX_BYTES + 1];
        assert_eq!(parse_all(&long).unwrap_err(), ProtocolError::TooBigInline);
        let mut header = b"*".to_vec();
        header.extend(std::iter::repeat_n(b'1', INLINE_MAX_BYTES + 1));
        assert_eq!(
            parse_all(&header).unwrap_err(),
            ProtocolError::TooBigMultibulkHeader
        );
    }

    #[test]
    fn empty_and_negative_counts_are_skipped() {
        assert_eq!(
            parse_all(b"*0\r\n*-1\r\n\r\n").unwrap(),
            Vec::<Vec<Vec<u8>>>::new()
        );
    }

    #[test]
    fn strict_integers() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-12"), Some(-12));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"-0",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_int(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
