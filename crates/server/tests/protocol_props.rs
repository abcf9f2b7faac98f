//! Property tests of the request parser: random bytes never panic or hang
//! it, and valid commands survive any split into reads.

use engram_server::resp::{RequestParser, Step};
use proptest::prelude::*;

const MAX_BULK: usize = 1 << 20;

/// Feeds `input` to a parser as one buffer; returns the commands parsed and
/// whether it stopped on an error.
fn parse_all(input: &[u8]) -> (Vec<Vec<Vec<u8>>>, bool) {
    let mut parser = RequestParser::new(MAX_BULK);
    let mut at = 0;
    let mut commands = Vec::new();
    loop {
        match parser.parse(&input[at..]) {
            Err(_) => return (commands, true),
            Ok(Step::Incomplete { needed }) => {
                assert!(
                    needed > input.len() - at,
                    "claims incomplete with enough bytes"
                );
                return (commands, false);
            }
            Ok(Step::Skip { consumed }) => {
                assert!(consumed > 0 && consumed <= input.len() - at);
                at += consumed;
            }
            Ok(Step::Command { consumed }) => {
                assert!(consumed > 0 && consumed <= input.len() - at);
                let args = parser.args(&input[at..]);
                assert!(!args.is_empty());
                commands.push(args.iter().map(<[u8]>::to_vec).collect());
                at += consumed;
            }
        }
    }
}

fn encode(commands: &[Vec<Vec<u8>>]) -> Vec<u8> {
    let mut out = Vec::new();
    for command in commands {
        out.extend_from_slice(format!("*{}\r\n", command.len()).as_bytes());
        for arg in command {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..2048)) {
        parse_all(&input);
    }

    #[test]
    fn protocol_shaped_noise_never_panics(
        parts in proptest::collection::vec(
            prop_oneof![
                Just(b"*".to_vec()), Just(b"$".to_vec()), Just(b"\r\n".to_vec()),
                Just(b"-1".to_vec()), Just(b"3".to_vec()), Just(b"\"".to_vec()),
                Just(b"'".to_vec()), Just(b"\\x4".to_vec()), Just(b" ".to_vec()),
                proptest::collection::vec(any::<u8>(), 0..8),
            ],
            0..64,
        )
    ) {
        parse_all(&parts.concat());
    }

    #[test]
    fn commands_survive_any_split(
        commands in proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6),
            1..8,
        ),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let bytes = encode(&commands);
        // Deliver the stream in pieces, keeping unparsed bytes like a
        // connection does.
        let mut cut_points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        cut_points.push(bytes.len());
        cut_points.sort_unstable();
        let mut parser = RequestParser::new(MAX_BULK);
        let mut buffer = Vec::new();
        let mut delivered = 0;
        let mut parsed = Vec::new();
        for cut in cut_points {
            buffer.extend_from_slice(&bytes[delivered..cut]);
            delivered = cut;
            loop {
                match parser.parse(&buffer).unwrap() {
                    Step::Command { consumed } => {
                        parsed.push(parser.args(&buffer).iter().map(<[u8]>::to_vec).collect::<Vec<_>>());
                        buffer.drain(..consumed);
                    }
                    Step::Skip { consumed } => { buffer.drain(..consumed); }
                    Step::Incomplete { .. } => break,
                }
            }
        }
        prop_assert!(buffer.is_empty());
        prop_assert_eq!(parsed, commands);
    }
}
