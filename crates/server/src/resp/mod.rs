//! The Redis serialization protocol: requests in, replies out.

pub mod parse;
pub mod reply;

pub use parse::{parse_int, Args, OwnedArgs, ProtocolError, RequestParser, Step};
pub use reply::{format_double, ReplyWriter};
