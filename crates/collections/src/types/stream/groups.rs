//! Consumer groups: the last delivered ID, the logical read counter, the
//! pending entries list (PEL: ID -> owner, last delivery time, delivery
//! count) and the consumers, each with the IDs it owns in the PEL.
//!
//! The group's PEL is the truth; each consumer's set is its index by
//! owner, kept in step by the methods here (and checked by the image
//! decoder, which rebuilds it from the group's PEL).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::StreamId;

/// Redis's `SCG_INVALID_ENTRIES_READ`: the read counter is unknown.
pub const ENTRIES_READ_UNKNOWN: i64 = -1;

/// A consumer group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The last ID delivered to the group.
    pub last_id: StreamId,
    /// Entries read by the group, -1 when unknown.
    pub entries_read: i64,
    pub(crate) pel: BTreeMap<StreamId, Pending>,
    pub(crate) consumers: BTreeMap<Arc<[u8]>, Consumer>,
}

/// A pending (delivered, unacknowledged) entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The consumer that owns it.
    pub consumer: Arc<[u8]>,
    /// When it was last delivered (Unix ms).
    pub delivery_ms: u64,
    /// How many times it was delivered.
    pub deliveries: u64,
}

/// A consumer of a group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consumer {
    /// When it last read or claimed (Unix ms).
    pub seen_ms: u64,
    pub(crate) pel: BTreeSet<StreamId>,
}

impl Consumer {
    /// The IDs it owns in the group's PEL, in order.
    pub fn pending(&self) -> &BTreeSet<StreamId> {
        &self.pel
    }
}

impl Group {
    /// A group delivering after `last_id`.
    pub fn new(last_id: StreamId, entries_read: i64) -> Group {
        Group {
            last_id,
            entries_read,
            pel: BTreeMap::new(),
            consumers: BTreeMap::new(),
        }
    }

    /// The pending entries list.
    pub fn pel(&self) -> &BTreeMap<StreamId, Pending> {
        &self.pel
    }

    /// The consumers, by name.
    pub fn consumers(&self) -> &BTreeMap<Arc<[u8]>, Consumer> {
        &self.consumers
    }

    /// The consumer named `name`.
    pub fn consumer(&self, name: &[u8]) -> Option<&Consumer> {
        self.consumers.get(name)
    }

    /// Creates the consumer if absent, and sets its seen time.
    pub fn touch(&mut self, name: &[u8], seen_ms: u64) {
        match self.consumers.get_mut(name) {
            Some(consumer) => consumer.seen_ms = seen_ms,
            None => {
                self.consumers.insert(
                    name.into(),
                    Consumer {
                        seen_ms,
                        pel: BTreeSet::new(),
                    },
                );
            }
        }
    }

    /// Removes a consumer and its pending entries.
    pub fn remove_consumer(&mut self, name: &[u8]) -> Option<Consumer> {
        let consumer = self.consumers.remove(name)?;
        for id in &consumer.pel {
            self.pel.remove(id);
        }
        Some(consumer)
    }

    /// Makes `id` pending for `consumer` (created if absent, seen at 0)
    /// with this delivery time and count, wherever it was pending before.
    pub fn claim(&mut self, id: StreamId, consumer: &[u8], delivery_ms: u64, deliveries: u64) {
        if let Some(previous) = self.pel.get(&id) {
            if *previous.consumer != *consumer {
                let owner = previous.consumer.clone();
                if let Some(owner) = self.consumers.get_mut(&*owner) {
                    owner.pel.remove(&id);
                }
            }
        }
        if !self.consumers.contains_key(consumer) {
            self.touch(consumer, 0);
        }
        let name = self
            .consumers
            .get_key_value(consumer)
            .map(|(name, _)| name.clone())
            .expect("just created");
        self.consumers
            .get_mut(consumer)
            .expect("present")
            .pel
            .insert(id);
        self.pel.insert(
            id,
            Pending {
                consumer: name,
                delivery_ms,
                deliveries,
            },
        );
    }

    /// Acknowledges `id`; whether it was pending.
    pub fn ack(&mut self, id: StreamId) -> bool {
        let Some(pending) = self.pel.remove(&id) else {
            return false;
        };
        if let Some(owner) = self.consumers.get_mut(&*pending.consumer) {
            owner.pel.remove(&id);
        }
        true
    }

    /// Approximate heap bytes.
    pub fn approx_heap_bytes(&self) -> usize {
        const PEL_ENTRY_BYTES: usize = 64;
        const CONSUMER_BYTES: usize = 96;
        self.pel.len() * PEL_ENTRY_BYTES * 2
            + self
                .consumers
                .keys()
                .map(|name| name.len() + CONSUMER_BYTES)
                .sum::<usize>()
    }

    /// A group from its parts (the image decoder); the consumers' own
    /// lists are rebuilt from the PEL. None when a pending entry names a
    /// consumer the group does not have.
    pub(crate) fn from_parts(
        last_id: StreamId,
        entries_read: i64,
        consumers: Vec<(Arc<[u8]>, u64)>,
        pel: Vec<(StreamId, usize, u64, u64)>,
    ) -> Option<Group> {
        let mut group = Group::new(last_id, entries_read);
        for (name, seen_ms) in &consumers {
            group.consumers.insert(
                name.clone(),
                Consumer {
                    seen_ms: *seen_ms,
                    pel: BTreeSet::new(),
                },
            );
        }
        for (id, owner, delivery_ms, deliveries) in pel {
            let (name, _) = consumers.get(owner)?;
            group.consumers.get_mut(name)?.pel.insert(id);
            group.pel.insert(
                id,
                Pending {
                    consumer: name.clone(),
                    delivery_ms,
                    deliveries,
                },
            );
        }
        Some(group)
    }
}
