//! Feeds arbitrary bytes to the request parser, whole and in two reads, and
//! checks its promises: no panic, progress on every command, and the same
//! commands whichever way the bytes arrive.

#![no_main]

use engram_server::resp::{RequestParser, Step};
use libfuzzer_sys::fuzz_target;

fn commands(chunks: &[&[u8]]) -> (Vec<Vec<Vec<u8>>>, bool) {
    let mut parser = RequestParser::new(1 << 20);
    let mut buffer = Vec::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buffer.extend_from_slice(chunk);
        loop {
            match parser.parse(&buffer) {
                Ok(Step::Command { consumed }) => {
                    assert!(consumed > 0 && consumed <= buffer.len());
                    out.push(parser.args(&buffer).iter().map(<[u8]>::to_vec).collect());
                    buffer.drain(..consumed);
                }
                Ok(Step::Skip { consumed }) => {
                    assert!(consumed > 0 && consumed <= buffer.len());
                    buffer.drain(..consumed);
                }
                Ok(Step::Incomplete { .. }) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

fuzz_target!(|data: &[u8]| {
    commands(&[data]);
    if let Some((&split, rest)) = data.split_first() {
        let at = split as usize % (rest.len() + 1);
        let (a, b) = rest.split_at(at);
        let pieces = commands(&[a, b]);
        let joined = commands(&[rest]);
        // Where the bytes were cut must not change what is parsed.
        assert_eq!(pieces, joined);
    }
});
