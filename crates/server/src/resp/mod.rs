//! The Redis serialization protocol: requests in, replies out.

pub mod parse;
pub mod redis_double;
pub mod reply;

pub use parse::{parse_int, Args, OwnedArgs, ProtocolError, RequestParser, Step};
pub use redis_double::redis_double;
pub use reply::{format_double, ReplyWriter};
