//! A Raft entry's bytes: what the leader proposes for what a client
//! queued (its pipelined writes, or a MULTI/EXEC as one item), and what
//! every member decodes to apply it alike: the leader's clock, the
//! client's protocol, the caller's ACL rules when it has any, and per item
//! its database and commands.

use bytes::Buf;

use super::Pending;
use std::ops::Range;

use crate::resp::Args;
#[cfg(test)]
use crate::resp::OwnedArgs;

/// An item's tag: a MULTI/EXEC (its replies are one array).
pub(super) const EXEC: u8 = 1;
/// In the entry's flags byte (beside RESP3's bit): the caller's ACL line
/// follows. Entries without it (every unrestricted caller's, and those
/// written before it existed) apply with every permission.
const CALLER: u8 = 2;

/// An entry: `[time_ms u64][flags u8]([caller len u32][caller])?[items
/// u32]`, then per item `[tag u8][db u8][commands u32]` and each command's
/// `[argc u32]([len u32][bytes])*`. Local replies are not in it.
pub(super) fn encode_entry(
    time_ms: u64,
    resp3: bool,
    caller: Option<&str>,
    pending: &[Pending],
) -> Vec<u8> {
    let mut entry = Vec::with_capacity(256);
    entry.extend_from_slice(&time_ms.to_le_bytes());
    entry.push(resp3 as u8 | if caller.is_some() { CALLER } else { 0 });
    if let Some(line) = caller {
        entry.extend_from_slice(&(line.len() as u32).to_le_bytes());
        entry.extend_from_slice(line.as_bytes());
    }
    let items = pending
        .iter()
        .filter(|p| !matches!(p, Pending::Local(_)))
        .count();
    entry.extend_from_slice(&(items as u32).to_le_bytes());
    for p in pending {
        match p {
            Pending::Command { db, args, .. } => {
                entry.extend_from_slice(&[0, *db as u8]);
                entry.extend_from_slice(&1u32.to_le_bytes());
                encode_args(&mut entry, &args.args());
            }
            Pending::Exec { db, queue, .. } => {
                entry.extend_from_slice(&[EXEC, *db as u8]);
                entry.extend_from_slice(&(queue.len() as u32).to_le_bytes());
                for args in queue {
                    encode_args(&mut entry, &args.args());
                }
            }
            Pending::Local(_) => {}
        }
    }
    entry
}

fn encode_args(out: &mut Vec<u8>, args: &Args) {
    out.extend_from_slice(&(args.len() as u32).to_le_bytes());
    for arg in args.iter() {
        out.extend_from_slice(&(arg.len() as u32).to_le_bytes());
        out.extend_from_slice(arg);
    }
}

/// A decoded entry. Its commands' arguments are ranges of the entry's
/// own bytes, not copies: the apply thread decodes every entry of the
/// log, and copying each argument was a tenth of its time.
pub(super) struct Entry<'a> {
    pub time_ms: u64,
    pub resp3: bool,
    pub caller: Option<&'a str>,
    pub items: Vec<Item>,
    data: &'a [u8],
    /// Every argument of every command, as ranges of `data`.
    args: Vec<Range<usize>>,
    /// Each command's arguments: a span of `args`.
    commands: Vec<Range<usize>>,
}

/// What one client queued: a command, or a MULTI/EXEC's commands.
pub(super) struct Item {
    pub db: usize,
    pub exec: bool,
    /// A span of `Entry::commands`.
    commands: Range<usize>,
}

impl<'a> Entry<'a> {
    /// `item`'s commands, in order.
    pub fn commands(&self, item: &Item) -> impl ExactSizeIterator<Item = Args<'_>> + '_ {
        self.commands[item.commands.clone()]
            .iter()
            .map(|span| Args::new(self.data, &self.args[span.clone()]))
    }
}

fn take<'a>(r: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    (r.len() >= n).then(|| {
        let (head, rest) = r.split_at(n);
        *r = rest;
        head
    })
}

pub(super) fn decode_entry(data: &[u8]) -> Option<Entry<'_>> {
    let mut r = data;
    // Where `r` stands in `data`.
    let at = |r: &[u8]| data.len() - r.len();
    let time_ms = r.try_get_u64_le().ok()?;
    let flags = r.try_get_u8().ok()?;
    let resp3 = flags & 1 != 0;
    let caller = match flags & CALLER {
        0 => None,
        _ => {
            let len = r.try_get_u32_le().ok()? as usize;
            Some(std::str::from_utf8(take(&mut r, len)?).ok()?)
        }
    };
    let n = r.try_get_u32_le().ok()? as usize;
    // Sized for the usual item, one command of three arguments (they
    // grew one push at a time: a tenth of the apply's allocations).
    let mut items = Vec::with_capacity(n.min(1024));
    let mut args = Vec::with_capacity(n.min(1024) * 3);
    let mut commands = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let tag = r.try_get_u8().ok()?;
        let db = r.try_get_u8().ok()?;
        let count = r.try_get_u32_le().ok()? as usize;
        let first = commands.len();
        for _ in 0..count {
            let argc = r.try_get_u32_le().ok()? as usize;
            let start = args.len();
            for _ in 0..argc {
                let len = r.try_get_u32_le().ok()? as usize;
                let from = at(r);
                take(&mut r, len)?;
                args.push(from..from + len);
            }
            commands.push(start..args.len());
        }
        items.push(Item {
            db: db as usize,
            exec: tag == EXEC,
            commands: first..commands.len(),
        });
    }
    Some(Entry {
        time_ms,
        resp3,
        caller,
        items,
        data,
        args,
        commands,
    })
}

pub(super) fn decode_replies(bytes: &[u8]) -> Vec<&[u8]> {
    let mut r = bytes;
    let mut replies = Vec::new();
    while let Ok(len) = r.try_get_u32_le() {
        match take(&mut r, len as usize) {
            Some(reply) => replies.push(reply),
            None => break,
        }
    }
    replies
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let owned = |parts: &[&[u8]]| OwnedArgs::from_slices(parts);
        let pending = [
            Pending::Command {
                db: 3,
                args: owned(&[b"set", b"k", b"v"]),
                silent: false,
                wait: None,
            },
            Pending::Local(b"-ERR local\r\n".to_vec()),
            Pending::Exec {
                db: 200,
                queue: vec![owned(&[b"incr", b"n"]), owned(&[b"get", b"n"])],
                silent: true,
            },
        ];
        let entry = encode_entry(42, true, None, &pending);
        let decoded = decode_entry(&entry).unwrap();
        assert_eq!((decoded.time_ms, decoded.resp3), (42, true));
        assert_eq!(decoded.caller, None);
        assert_eq!(
            decoded.items.len(),
            2,
            "the local reply is not in the entry"
        );
        assert_eq!((decoded.items[0].db, decoded.items[0].exec), (3, false));
        let set: Vec<&[u8]> = decoded
            .commands(&decoded.items[0])
            .next()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(set, [&b"set"[..], b"k", b"v"]);
        let exec: Vec<Vec<u8>> = decoded
            .commands(&decoded.items[1])
            .map(|args| args.get(0).to_vec())
            .collect();
        assert_eq!(exec, [b"incr".to_vec(), b"get".to_vec()]);
        assert_eq!((decoded.items[1].db, decoded.items[1].exec), (200, true));
        // A truncated entry is refused, not misread.
        assert!(decode_entry(&entry[..entry.len() - 1]).is_none());

        // A restricted caller's line travels with the entry, RESP2 too.
        let line = "user app on resetchannels ~app:* -@all +eval +set";
        let entry = encode_entry(7, false, Some(line), &pending[..1]);
        let decoded = decode_entry(&entry).unwrap();
        assert_eq!(decoded.caller, Some(line));
        assert!(!decoded.resp3);
        assert_eq!(
            decoded.commands(&decoded.items[0]).next().unwrap().get(1),
            b"k"
        );
        assert!(decode_entry(&entry[..20]).is_none(), "cut inside the line");
    }
}
