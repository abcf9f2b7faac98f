//! LCS: the longest common subsequence of two strings, with Redis 7.0's
//! options (LEN, IDX, MINMATCHLEN, WITHMATCHLEN) and its choice among
//! equally long answers (the same table walk).

use std::sync::atomic::Ordering;

use super::{err, int_arg, is, CmdError, CmdResult, CommandSpec, Ctx, Group, READONLY, SYNTAX};
use crate::keyspace::value::{Kind, StringValue};
use crate::resp::Args;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("string");
    vec![g.command(
        "lcs",
        -3,
        READONLY,
        (1, 2, 1),
        lcs,
        "Finds the longest common substring.",
    )]
}

/// A key's string (an absent key is empty); another type fails the
/// command.
fn string_or_empty(ctx: &mut Ctx, key: &[u8]) -> Result<Vec<u8>, CmdError> {
    let value = ctx.read(key, |meta, payload| {
        if meta.kind() != Kind::String {
            return Err(err("ERR The specified keys must contain string values"));
        }
        Ok(StringValue::from_payload(meta, payload).to_bytes())
    })?;
    Ok(value.unwrap_or_default())
}

/// One matching range: positions in the first and second string
/// (inclusive), and its length.
struct Match {
    a: (usize, usize),
    b: (usize, usize),
    len: usize,
}

fn lcs(ctx: &mut Ctx, args: Args) -> CmdResult {
    let a = string_or_empty(ctx, args.get(1))?;
    let b = string_or_empty(ctx, args.get(2))?;
    let (mut get_len, mut get_idx, mut with_match_len) = (false, false, false);
    let mut min_match_len: i64 = 0;
    let mut j = 3;
    while j < args.len() {
        let option = args.get(j);
        let more = args.len() - 1 - j;
        if is(option, "idx") {
            get_idx = true;
        } else if is(option, "len") {
            get_len = true;
        } else if is(option, "withmatchlen") {
            with_match_len = true;
        } else if is(option, "minmatchlen") && more > 0 {
            min_match_len = int_arg(args.get(j + 1))?.max(0);
            j += 1;
        } else {
            return Err(err(SYNTAX));
        }
        j += 1;
    }
    if get_len && get_idx {
        return Err(err(
            "ERR If you want both the length and indexes, please just use IDX.",
        ));
    }
    if a.len() >= u32::MAX as usize - 1 || b.len() >= u32::MAX as usize - 1 {
        return Err(err("ERR String too long for LCS"));
    }
    let cells = (a.len() as u64 + 1) * (b.len() as u64 + 1);
    let max_bulk = ctx
        .shared
        .runtime
        .proto_max_bulk_len
        .load(Ordering::Relaxed) as u64;
    if cells * 4 > max_bulk {
        return Err(err(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let table = Table::build(&a, &b);
    let total = table.at(a.len(), b.len()) as usize;
    if get_len {
        ctx.out.int(total as i64);
        return Ok(());
    }
    let (common, matches) = walk(&a, &b, &table, min_match_len as u64);
    if !get_idx {
        ctx.out.bulk(&common);
        return Ok(());
    }
    ctx.out.map(2);
    ctx.out.bulk(b"matches");
    ctx.out.array(matches.len());
    for m in matches {
        ctx.out.array(2 + usize::from(with_match_len));
        for (start, end) in [m.a, m.b] {
            ctx.out.array(2);
            ctx.out.int(start as i64);
            ctx.out.int(end as i64);
        }
        if with_match_len {
            ctx.out.int(m.len as i64);
        }
    }
    ctx.out.bulk(b"len");
    ctx.out.int(total as i64);
    Ok(())
}

/// The dynamic-programming table: cell (i, j) is the LCS length of the
/// first i bytes of `a` and the first j of `b`.
struct Table {
    cells: Vec<u32>,
    width: usize,
}

impl Table {
    fn build(a: &[u8], b: &[u8]) -> Table {
        let width = b.len() + 1;
        let mut cells = vec![0u32; (a.len() + 1) * width];
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                cells[i * width + j] = if a[i - 1] == b[j - 1] {
                    cells[(i - 1) * width + j - 1] + 1
                } else {
                    cells[(i - 1) * width + j].max(cells[i * width + j - 1])
                };
            }
        }
        Table { cells, width }
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.cells[i * self.width + j]
    }
}

/// Walks the table back from the end as Redis does: the common
/// subsequence, and its runs of adjacent matches (last first) of at least
/// `min_len` bytes (0: all).
fn walk(a: &[u8], b: &[u8], table: &Table, min_len: u64) -> (Vec<u8>, Vec<Match>) {
    let mut idx = table.at(a.len(), b.len()) as usize;
    let mut common = vec![0u8; idx];
    let mut matches = Vec::new();
    // `a_start == a.len()`: no run in progress.
    let unset = a.len();
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (unset, 0, 0, 0);
    let (mut i, mut j) = (a.len(), b.len());
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            common[idx - 1] = a[i - 1];
            if a_start == unset {
                (a_start, a_end, b_start, b_end) = (i - 1, i - 1, j - 1, j - 1);
            } else if a_start == i && b_start == j {
                // Extends the run backwards.
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            // A run that reached the start of either string ends here.
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if table.at(i - 1, j) > table.at(i, j - 1) {
                i -= 1;
            } else {
                j -= 1;
            }
            if a_start != unset {
                emit = true;
            }
        }
        if emit {
            let len = a_end.wrapping_sub(a_start).wrapping_add(1);
            if min_len == 0 || len as u64 >= min_len {
                matches.push(Match {
                    a: (a_start, a_end),
                    b: (b_start, b_end),
                    len,
                });
            }
            a_start = unset;
        }
    }
    (common, matches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_documentation_example() {
        let (a, b) = (b"ohmytext".as_slice(), b"mynewtext".as_slice());
        let table = Table::build(a, b);
        assert_eq!(table.at(a.len(), b.len()), 6);
        let (common, matches) = walk(a, b, &table, 0);
        assert_eq!(common, b"mytext");
        let ranges: Vec<_> = matches.iter().map(|m| (m.a, m.b, m.len)).collect();
        assert_eq!(ranges, vec![((4, 7), (5, 8), 4), ((2, 3), (0, 1), 2)]);
        let (_, long) = walk(a, b, &table, 4);
        assert_eq!(long.len(), 1);
    }
}
