//! How a Redis value is laid out in an engine value.
//!
//! Every engine value starts with one little-endian 8-byte word, the *meta
//! word*: bits 0..48 hold the expiry time in Unix milliseconds (0: none),
//! bits 48..56 the encoding, bits 56..64 the type. The payload follows.
//! The engine keeps values 8-byte aligned, so the meta word and an integer
//! payload are single aligned words: `EXPIRE`/`PERSIST` and `INCR` change
//! them in place with one atomic 8-byte store instead of writing a new
//! record, and a crash can only see the word before or after.

/// Bytes of the meta word.
pub const META_BYTES: usize = 8;
/// Latest expiry time a key can have (48 bits of milliseconds: year 10889).
pub const MAX_EXPIRE_MS: u64 = (1 << 48) - 1;

/// A key's type. Strings live in the engine with this meta word in front;
/// the other kinds live in the collections store, and their meta words
/// exist only in memory (for TYPE, TTL, WRONGTYPE checks), never on media.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    String,
    Hash,
    Set,
    SortedSet,
    List,
    Stream,
}

impl Kind {
    /// The name `TYPE` replies with.
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::Set => "set",
            Kind::SortedSet => "zset",
            Kind::List => "list",
            Kind::Stream => "stream",
        }
    }

    fn code(self) -> u64 {
        match self {
            Kind::String => 0,
            Kind::Hash => 1,
            Kind::Set => 2,
            Kind::SortedSet => 3,
            Kind::List => 4,
            Kind::Stream => 5,
        }
    }

    pub fn of_collection(kind: engram_collections::types::Kind) -> Kind {
        use engram_collections::types::Kind as C;
        match kind {
            C::Hash => Kind::Hash,
            C::Set => Kind::Set,
            C::SortedSet => Kind::SortedSet,
            C::List => Kind::List,
            C::Stream => Kind::Stream,
        }
    }

    /// What `OBJECT ENCODING` says for a collection (Redis's names for the
    /// structures ours correspond to).
    pub fn collection_encoding(self) -> &'static str {
        match self {
            Kind::String => "raw",
            Kind::Hash | Kind::Set => "hashtable",
            Kind::SortedSet => "skiplist",
            Kind::List => "quicklist",
            Kind::Stream => "stream",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Bytes as given.
    Raw,
    /// A canonical decimal integer stored as an i64 (Redis's "int").
    Int,
}

impl Encoding {
    /// The name `OBJECT ENCODING` replies with.
    pub fn name(self, payload_len: usize) -> &'static str {
        match self {
            Encoding::Int => "int",
            // Redis calls short strings "embstr"; clients only compare
            // "int" against the rest, but keep the familiar names.
            Encoding::Raw if payload_len <= 44 => "embstr",
            Encoding::Raw => "raw",
        }
    }
}

/// A decoded meta word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta(pub u64);

impl Meta {
    pub fn new(kind: Kind, encoding: Encoding, expire_at: Option<u64>) -> Meta {
        let kind = kind.code();
        let encoding = match encoding {
            Encoding::Raw => 0u64,
            Encoding::Int => 1u64,
        };
        Meta(kind << 56 | encoding << 48 | expire_at.unwrap_or(0).min(MAX_EXPIRE_MS))
    }

    /// The meta word found in a value, if it names a known type.
    pub fn parse(word: u64) -> Option<Meta> {
        let kind = word >> 56;
        let encoding = (word >> 48) & 0xff;
        (kind == 0 && encoding <= 1).then_some(Meta(word))
    }

    /// The in-memory meta word of a collection key.
    pub fn collection(kind: engram_collections::types::Kind, expire_at_ms: u64) -> Meta {
        Meta::new(
            Kind::of_collection(kind),
            Encoding::Raw,
            (expire_at_ms != 0).then_some(expire_at_ms),
        )
    }

    pub fn kind(self) -> Kind {
        match self.0 >> 56 {
            1 => Kind::Hash,
            2 => Kind::Set,
            3 => Kind::SortedSet,
            4 => Kind::List,
            5 => Kind::Stream,
            _ => Kind::String,
        }
    }

    pub fn is_collection(self) -> bool {
        self.kind() != Kind::String
    }

    pub fn encoding(self) -> Encoding {
        if (self.0 >> 48) & 0xff == 1 {
            Encoding::Int
        } else {
            Encoding::Raw
        }
    }

    pub fn expire_at(self) -> Option<u64> {
        match self.0 & MAX_EXPIRE_MS {
            0 => None,
            at => Some(at),
        }
    }

    pub fn with_expire(self, expire_at: Option<u64>) -> Meta {
        Meta(self.0 & !MAX_EXPIRE_MS | expire_at.unwrap_or(0).min(MAX_EXPIRE_MS))
    }

    pub fn is_expired(self, now_ms: u64) -> bool {
        self.expire_at().is_some_and(|at| at <= now_ms)
    }
}

/// A value whose bytes do not decode: a bug or damage, reported as an error
/// on that key, never returned as data.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the stored value is malformed (meta word {0:#018x})")]
pub struct Malformed(pub u64);

/// Splits an engine value into its meta word and payload.
pub fn decode(value: &[u8]) -> Result<(Meta, &[u8]), Malformed> {
    let Some(word) = value.get(..META_BYTES) else {
        return Err(Malformed(0));
    };
    let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
    let meta = Meta::parse(word).ok_or(Malformed(word))?;
    let payload = &value[META_BYTES..];
    if meta.encoding() == Encoding::Int && payload.len() != 8 {
        return Err(Malformed(word));
    }
    Ok((meta, payload))
}

/// A string's value as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StringValue<'a> {
    Raw(&'a [u8]),
    Int(i64),
}

impl StringValue<'_> {
    pub fn from_payload(meta: Meta, payload: &[u8]) -> StringValue<'_> {
        match meta.encoding() {
            Encoding::Int => StringValue::Int(i64::from_le_bytes(
                payload.try_into().expect("checked by decode"),
            )),
            Encoding::Raw => StringValue::Raw(payload),
        }
    }

    /// The bytes a client sees.
    pub fn to_bytes(self) -> Vec<u8> {
        match self {
            StringValue::Raw(bytes) => bytes.to_vec(),
            StringValue::Int(n) => itoa::Buffer::new().format(n).as_bytes().to_vec(),
        }
    }

    pub fn len(self) -> usize {
        match self {
            StringValue::Raw(bytes) => bytes.len(),
            StringValue::Int(n) => itoa::Buffer::new().format(n).len(),
        }
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// Encodes a string value, choosing the integer encoding when the text is a
/// canonical i64 (so `INCR` can later update it in place).
pub fn encode_string(out: &mut Vec<u8>, text: &[u8], expire_at: Option<u64>) {
    out.clear();
    match canonical_int(text) {
        Some(n) => {
            out.extend_from_slice(
                &Meta::new(Kind::String, Encoding::Int, expire_at)
                    .0
                    .to_le_bytes(),
            );
            out.extend_from_slice(&n.to_le_bytes());
        }
        None => {
            out.reserve(META_BYTES + text.len());
            out.extend_from_slice(
                &Meta::new(Kind::String, Encoding::Raw, expire_at)
                    .0
                    .to_le_bytes(),
            );
            out.extend_from_slice(text);
        }
    }
}

/// Encodes an integer string value.
pub fn encode_int(out: &mut Vec<u8>, n: i64, expire_at: Option<u64>) {
    out.clear();
    out.extend_from_slice(
        &Meta::new(Kind::String, Encoding::Int, expire_at)
            .0
            .to_le_bytes(),
    );
    out.extend_from_slice(&n.to_le_bytes());
}

/// The integer `text` spells if it spells one exactly as Redis would print
/// it (no sign on zero, no leading zeros, at most 20 characters).
pub fn canonical_int(text: &[u8]) -> Option<i64> {
    if text.is_empty() || text.len() > 20 {
        return None;
    }
    parse_int(text)
}

/// Redis's `string2ll`: an optional '-', digits, no leading zeros, no '+'.
pub fn parse_int(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    if negative && digits == b"0" {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let digit = (d - b'0') as i64;
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_word_round_trips() {
        let meta = Meta::new(Kind::String, Encoding::Int, Some(1_700_000_000_000));
        let parsed = Meta::parse(meta.0).unwrap();
        assert_eq!(parsed.encoding(), Encoding::Int);
        assert_eq!(parsed.expire_at(), Some(1_700_000_000_000));
        assert_eq!(parsed.with_expire(None).expire_at(), None);
        assert_eq!(parsed.with_expire(None).encoding(), Encoding::Int);
        assert!(parsed.is_expired(1_700_000_000_000));
        assert!(!parsed.is_expired(1_699_999_999_999));
        assert!(Meta::parse(7 << 56).is_none());
    }

    #[test]
    fn integers_are_encoded_as_int_only_when_canonical() {
        let mut out = Vec::new();
        for (text, int) in [
            ("12", true),
            ("-7", true),
            ("007", false),
            ("1.0", false),
            ("", false),
        ] {
            encode_string(&mut out, text.as_bytes(), None);
            let (meta, payload) = decode(&out).unwrap();
            assert_eq!(meta.encoding() == Encoding::Int, int, "{text}");
            assert_eq!(
                StringValue::from_payload(meta, payload).to_bytes(),
                text.as_bytes()
            );
        }
    }

    #[test]
    fn malformed_values_are_errors() {
        assert!(decode(b"short").is_err());
        let mut bad = Meta::new(Kind::String, Encoding::Int, None)
            .0
            .to_le_bytes()
            .to_vec();
        bad.extend_from_slice(b"abc");
        assert!(decode(&bad).is_err());
    }
}
