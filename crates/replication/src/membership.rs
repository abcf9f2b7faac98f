//! Membership changes: the group's members and their bus addresses.
//!
//! A change is a Raft configuration change (raft-rs's `ConfChange`, one at
//! a time): the leader proposes it, and every node applies it when it is
//! committed, in log order, in the Raft loop: the new membership is
//! written to the log's state slots and synced before anything after it
//! is applied, the bus starts or stops talking to the node, and the
//! members with their bus addresses are written to `DIR/raft/peers`, which
//! from then on overrides `--peers` at a restart.
//!
//! A node is added as a learner (it receives the log but does not vote),
//! started with `join`: it has no membership until the leader's snapshot
//! gives it the group's (its hello asks for one); once its log has caught
//! up with the leader's commit index the leader promotes it to voter. A
//! voter is removed in one step; the leader refuses to remove itself
//! (hand leadership to another node first) or the last voter.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::error::{replace_file, Error, Result};
use crate::node::{parse_peers, Peer};

/// A change a client asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Adds node `id`, reachable on its bus at `bus`, as a learner (then
    /// promoted once caught up).
    Add { id: u64, bus: SocketAddr },
    /// Removes node `id`.
    Remove { id: u64 },
}

/// `DIR/raft/peers`: the members and their bus addresses after the last
/// membership change, `1@host:port,2@host:port,...` on one line.
pub(crate) struct PeersFile {
    path: PathBuf,
}

impl PeersFile {
    pub fn new(dir: &Path) -> PeersFile {
        PeersFile {
            path: dir.join("peers"),
        }
    }

    pub fn read(&self) -> Result<Option<Vec<Peer>>> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => parse_peers(text.trim())
                .map(Some)
                .map_err(|e| Error::Corrupt(format!("{}: {e}", self.path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("reading", &self.path, e)),
        }
    }

    /// Writes the members durably (a temporary file synced and renamed).
    pub fn write(&self, peers: &[Peer]) -> Result<()> {
        let text = peers
            .iter()
            .map(|p| format!("{}@{}", p.id, p.bus))
            .collect::<Vec<_>>()
            .join(",");
        replace_file(&self.path, &[text.as_bytes(), b"\n"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peers_file_round_trips_and_refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let file = PeersFile::new(dir.path());
        assert!(file.read().unwrap().is_none());
        let peers = parse_peers("1@127.0.0.1:7001,4@127.0.0.1:7004").unwrap();
        file.write(&peers).unwrap();
        assert_eq!(file.read().unwrap().unwrap(), peers);
        std::fs::write(dir.path().join("peers"), "1@nowhere:x").unwrap();
        let error = file.read().expect_err("refused");
        assert!(error.to_string().contains("peers"), "{error}");
    }
}
