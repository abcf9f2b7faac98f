//! A group's active expiry and its eviction, proposed by the leader.

use std::sync::Arc;

use super::entry::encode_entry;
use super::{refusal, Pending};
use crate::keyspace::now_ms;
use crate::resp::OwnedArgs;
use crate::shared::Shared;

/// How often the leader looks for expired keys, and how many it proposes
/// to delete at most each time (Redis's active expiry runs 10 times a
/// second too).
const EXPIRE_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);
const EXPIRE_BATCH: usize = 512;

/// A group's active expiry: members run no expiry cycle (their clocks
/// differ, and a key deleted on one member only would split the state);
/// the leader looks for due keys and proposes `ENGRAM.EXPIRED` for them,
/// which every member applies at the entry's time (Redis's master sends
/// its replicas a DEL for each key it expires).
pub async fn expire(shared: Arc<Shared>) {
    let Some(replica) = shared.group.get() else {
        return;
    };
    let mut tick = tokio::time::interval(EXPIRE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if shared.is_shutting_down() {
            return;
        }
        // CLIENT PAUSE WRITE holds expiry, as on a single node.
        if !replica.is_leader()
            || shared.keyspace.is_reloading()
            || shared.pause.holds(true).is_some()
        {
            continue;
        }
        let due = match shared.keyspace.try_guard().as_ref() {
            Some(keyspace) => keyspace.due_keys(now_ms(), EXPIRE_BATCH),
            None => continue,
        };
        if due.is_empty() {
            continue;
        }
        let pending = by_database(b"engram.expired", due);
        // Waited for, so the next look does not propose the same keys.
        if let Err(refused) = replica
            .propose(encode_entry(now_ms(), false, None, &pending))
            .await
        {
            log::debug!(
                "expiry of due keys not proposed: {}",
                refusal(replica, &refused)
            );
        }
    }
}

/// Proposes `ENGRAM.EVICTED` for `victims` (database, key), one command
/// per database, and lowers the eviction's in-flight flag once the entry
/// is applied here or refused (`eviction::group_eviction`).
pub fn propose_evictions(shared: &Shared, victims: Vec<(usize, Vec<u8>)>) {
    let proposing = shared.eviction.proposing.clone();
    let done = move || proposing.store(false, std::sync::atomic::Ordering::Release);
    let (Some(replica), Ok(runtime)) = (shared.group.get(), tokio::runtime::Handle::try_current())
    else {
        done();
        return;
    };
    let pending = by_database(b"engram.evicted", victims);
    let proposed = replica.propose(encode_entry(now_ms(), false, None, &pending));
    runtime.spawn(async move {
        if let Err(refused) = proposed.await {
            log::debug!("eviction not proposed: {refused:?}");
        }
        done();
    });
}

/// `command` with the keys of each database, one silent command per
/// database (an entry's item runs in one database).
fn by_database(command: &[u8], keys: Vec<(usize, Vec<u8>)>) -> Vec<Pending> {
    let mut by_db: std::collections::BTreeMap<usize, Vec<Vec<u8>>> = Default::default();
    for (db, key) in keys {
        by_db.entry(db).or_default().push(key);
    }
    by_db
        .into_iter()
        .map(|(db, keys)| {
            let mut parts: Vec<&[u8]> = vec![command];
            parts.extend(keys.iter().map(|k| k.as_slice()));
            Pending::Command {
                db,
                args: OwnedArgs::from_slices(&parts),
                silent: true,
                wait: None,
            }
        })
        .collect()
}
