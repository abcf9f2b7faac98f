//! Engram as configured by default (emulated persistent memory, sync policy
//! `never`: durable against a process crash, like the peers' settings here),
//! with the flush instruction chosen by `--flush`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use engram_engine::{Options, Store};

use super::{EngramSettings, KvSystem};

pub struct EngramSystem {
    store: Store,
    dir: PathBuf,
    settings: EngramSettings,
}

impl EngramSystem {
    pub fn open(
        dir: &Path,
        settings: EngramSettings,
        recovery_threads: usize,
    ) -> Result<EngramSystem> {
        let options = Options {
            flush: Some(settings.flush),
            recovery_threads,
            ..Options::default()
        };
        let store = Store::open(dir, options)
            .with_context(|| format!("opening engram store in {}", dir.display()))?;
        Ok(EngramSystem {
            store,
            dir: dir.to_path_buf(),
            settings,
        })
    }
}

impl KvSystem for EngramSystem {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.store.put(key, value)?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.store.get(key)?)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.store.delete(key)?;
        Ok(())
    }

    fn crash_and_reopen(self: Box<Self>, threads: usize) -> Result<(Box<dyn KvSystem>, Duration)> {
        let EngramSystem {
            store,
            dir,
            settings,
        } = *self;
        store.crash();
        let started = Instant::now();
        let reopened = EngramSystem::open(&dir, settings, threads)?;
        Ok((Box::new(reopened), started.elapsed()))
    }
}
