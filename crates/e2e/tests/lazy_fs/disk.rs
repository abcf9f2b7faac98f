//! The lazy file system's state, without FUSE: every file and directory
//! twice, as the kernel sees it now (`live`) and as a power failure would
//! leave it (`durable`), and the one rule that moves changes from the
//! first to the second ([`Disk::sync`]; the rule itself is in the parent
//! module's docs). `fuse.rs` turns the kernel's requests into these calls.
//!
//! Errors are errno values (`libc::ENOENT`, ...), as FUSE replies them.
//!
//! Memory: a file is a map of its non-zero 4 KiB pages, twice; a page
//! written all zeros is dropped, so the zeros a growing region writes back
//! cost nothing. Nodes are forgotten only at a power cycle (those the
//! durable tree no longer reaches): a test's worth of files.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

pub const PAGE_BYTES: u64 = 4096;
/// The root directory's inode (FUSE's `FUSE_ROOT_ID`).
pub const ROOT: u64 = 1;

type Page = Box<[u8; PAGE_BYTES as usize]>;

/// An errno value.
pub type Errno = i32;

/// A file's bytes: the pages holding a non-zero byte, and the length.
/// An absent page reads as zeros; no byte at or past `len` is non-zero.
#[derive(Clone, Debug, Default, PartialEq)]
struct Bytes {
    pages: BTreeMap<u64, Page>,
    len: u64,
}

impl Bytes {
    fn read(&self, offset: u64, size: u64) -> Vec<u8> {
        let end = offset.saturating_add(size).min(self.len);
        if offset >= end {
            return Vec::new();
        }
        let mut out = vec![0; (end - offset) as usize];
        for (&index, page) in self
            .pages
            .range(offset / PAGE_BYTES..=(end - 1) / PAGE_BYTES)
        {
            let page_start = index * PAGE_BYTES;
            let from = offset.max(page_start);
            let to = end.min(page_start + PAGE_BYTES);
            out[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&page[(from - page_start) as usize..(to - page_start) as usize]);
        }
        out
    }

    /// Writes `data` at `offset`, extending the length; adds the pages it
    /// may have changed to `changed`.
    fn write(&mut self, offset: u64, data: &[u8], changed: &mut BTreeSet<u64>) {
        let mut position = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let index = position / PAGE_BYTES;
            let within = (position % PAGE_BYTES) as usize;
            let (chunk, tail) = rest.split_at(rest.len().min(PAGE_BYTES as usize - within));
            let zeros = chunk.iter().all(|&byte| byte == 0);
            match self.pages.get_mut(&index) {
                // Zeros over an absent page change nothing.
                None if zeros => {}
                None => {
                    let mut page: Page = Box::new([0; PAGE_BYTES as usize]);
                    page[within..within + chunk.len()].copy_from_slice(chunk);
                    self.pages.insert(index, page);
                    changed.insert(index);
                }
                Some(page) => {
                    page[within..within + chunk.len()].copy_from_slice(chunk);
                    if zeros && page.iter().all(|&byte| byte == 0) {
                        self.pages.remove(&index);
                    }
                    changed.insert(index);
                }
            }
            position += chunk.len() as u64;
            rest = tail;
        }
        self.len = self.len.max(offset + data.len() as u64);
    }

    /// Truncates or extends (with zeros) to `len`.
    fn set_len(&mut self, len: u64, changed: &mut BTreeSet<u64>) {
        if len < self.len {
            let removed = self.pages.split_off(&len.div_ceil(PAGE_BYTES));
            changed.extend(removed.keys());
            let cut = (len % PAGE_BYTES) as usize;
            let index = len / PAGE_BYTES;
            if cut != 0 {
                if let Some(page) = self.pages.get_mut(&index) {
                    page[cut..].fill(0);
                    if page.iter().all(|&byte| byte == 0) {
                        self.pages.remove(&index);
                    }
                    changed.insert(index);
                }
            }
        }
        self.len = len;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

enum Body {
    File {
        live: Bytes,
        durable: Bytes,
        /// Pages where `live` may differ from `durable` (the length is
        /// copied whole at a sync).
        dirty: BTreeSet<u64>,
    },
    Dir {
        live: BTreeMap<OsString, u64>,
        durable: BTreeMap<OsString, u64>,
    },
}

struct Node {
    body: Body,
    perm: u16,
    /// Names in live directories.
    links: u32,
    modified_at: SystemTime,
}

impl Node {
    fn kind(&self) -> Kind {
        match self.body {
            Body::File { .. } => Kind::File,
            Body::Dir { .. } => Kind::Dir,
        }
    }
}

/// One namespace change waiting in the journal: the directory entries it
/// sets (`Some(inode)`) or removes (`None`), made durable together (a
/// rename is one change: the old name goes exactly when the new one comes).
struct NameChange {
    entries: Vec<(u64, OsString, Option<u64>)>,
}

impl NameChange {
    /// Whether the change gives `node` a name.
    fn names(&self, node: u64) -> bool {
        self.entries
            .iter()
            .any(|(_, _, target)| *target == Some(node))
    }

    /// Whether the change adds or removes an entry of directory `dir`.
    fn edits(&self, dir: u64) -> bool {
        self.entries.iter().any(|(parent, _, _)| *parent == dir)
    }
}

/// What `getattr` and `lookup` answer.
#[derive(Clone, Copy, Debug)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    /// 512-byte blocks holding non-zero pages.
    pub blocks: u64,
    pub perm: u16,
    pub links: u32,
    pub modified_at: SystemTime,
}

/// What reached the lazy disk, for tests that want to see it was used.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// fsync / fdatasync / msync(MS_SYNC) / fsyncdir requests that made
    /// something durable.
    pub syncs: u64,
    /// Of those, requests received after the power was cut (nothing made
    /// durable).
    pub syncs_after_cut: u64,
    /// Pages copied into the durable image.
    pub pages_made_durable: u64,
    /// Power cycles so far.
    pub power_cycles: u64,
}

/// What a power cut loses (see [`Disk::cut_power`]).
#[derive(Clone, Debug, Default)]
pub struct Unsynced {
    /// Files with bytes or a length not durable: path from the root, and
    /// pages that may differ.
    pub files: Vec<(String, usize)>,
    /// Name changes not durable.
    pub name_changes: usize,
}

pub struct Disk {
    nodes: HashMap<u64, Node>,
    /// Namespace changes not yet durable, oldest first.
    journal: Vec<NameChange>,
    next_ino: u64,
    /// False from a cut until the next power cycle: nothing more becomes
    /// durable, whatever the kernel asks.
    powered: bool,
    /// Cut the power once this inode has had this many more syncs (the
    /// last of them made durable): a cut at an exact point.
    cut_after: Option<(u64, u32)>,
    stats: Stats,
}

impl Default for Disk {
    fn default() -> Self {
        Disk::new()
    }
}

impl Disk {
    /// An empty file system: the root directory, durable.
    pub fn new() -> Disk {
        let root = Node {
            body: Body::Dir {
                live: BTreeMap::new(),
                durable: BTreeMap::new(),
            },
            perm: 0o755,
            links: 1,
            modified_at: SystemTime::now(),
        };
        Disk {
            nodes: HashMap::from([(ROOT, root)]),
            journal: Vec::new(),
            next_ino: ROOT + 1,
            powered: true,
            cut_after: None,
            stats: Stats::default(),
        }
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.nodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        self.nodes.get_mut(&ino).ok_or(libc::ENOENT)
    }

    fn live_entries(&self, dir: u64) -> Result<&BTreeMap<OsString, u64>, Errno> {
        match &self.node(dir)?.body {
            Body::Dir { live, .. } => Ok(live),
            Body::File { .. } => Err(libc::ENOTDIR),
        }
    }

    fn live_entries_mut(&mut self, dir: u64) -> Result<&mut BTreeMap<OsString, u64>, Errno> {
        match &mut self.node_mut(dir)?.body {
            Body::Dir { live, .. } => Ok(live),
            Body::File { .. } => Err(libc::ENOTDIR),
        }
    }

    fn file_mut(&mut self, ino: u64) -> Result<(&mut Bytes, &mut BTreeSet<u64>), Errno> {
        let node = self.node_mut(ino)?;
        node.modified_at = SystemTime::now();
        match &mut node.body {
            Body::File { live, dirty, .. } => Ok((live, dirty)),
            Body::Dir { .. } => Err(libc::EISDIR),
        }
    }

    pub fn attr(&self, ino: u64) -> Result<Attr, Errno> {
        let node = self.node(ino)?;
        let (size, pages) = match &node.body {
            Body::File { live, .. } => (live.len, live.pages.len() as u64),
            Body::Dir { live, .. } => (live.len() as u64, 0),
        };
        Ok(Attr {
            ino,
            kind: node.kind(),
            size,
            blocks: pages * (PAGE_BYTES / 512),
            perm: node.perm,
            links: node.links,
            modified_at: node.modified_at,
        })
    }

    pub fn lookup(&self, dir: u64, name: &OsStr) -> Result<Attr, Errno> {
        let ino = *self.live_entries(dir)?.get(name).ok_or(libc::ENOENT)?;
        self.attr(ino)
    }

    /// The live entries of `dir`, in name order.
    pub fn list(&self, dir: u64) -> Result<Vec<(OsString, u64, Kind)>, Errno> {
        let entries = self.live_entries(dir)?;
        Ok(entries
            .iter()
            .map(|(name, &ino)| (name.clone(), ino, self.nodes[&ino].kind()))
            .collect())
    }

    /// Creates an empty file or directory named `name` in `dir`.
    pub fn create(&mut self, dir: u64, name: &OsStr, kind: Kind, perm: u16) -> Result<Attr, Errno> {
        if self.live_entries(dir)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let body = match kind {
            Kind::File => Body::File {
                live: Bytes::default(),
                durable: Bytes::default(),
                dirty: BTreeSet::new(),
            },
            Kind::Dir => Body::Dir {
                live: BTreeMap::new(),
                durable: BTreeMap::new(),
            },
        };
        let node = Node {
            body,
            perm: perm & 0o7777,
            links: 1,
            modified_at: SystemTime::now(),
        };
        self.nodes.insert(ino, node);
        self.live_entries_mut(dir)?.insert(name.to_owned(), ino);
        self.journal.push(NameChange {
            entries: vec![(dir, name.to_owned(), Some(ino))],
        });
        self.attr(ino)
    }

    /// Removes the entry `name` of `dir`, which must be of `kind` (unlink:
    /// a file; rmdir: an empty directory).
    pub fn remove(&mut self, dir: u64, name: &OsStr, kind: Kind) -> Result<(), Errno> {
        let ino = *self.live_entries(dir)?.get(name).ok_or(libc::ENOENT)?;
        let node = self.node(ino)?;
        match (kind, &node.body) {
            (Kind::File, Body::Dir { .. }) => return Err(libc::EISDIR),
            (Kind::Dir, Body::File { .. }) => return Err(libc::ENOTDIR),
            (Kind::Dir, Body::Dir { live, .. }) if !live.is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        self.live_entries_mut(dir)?.remove(name);
        self.node_mut(ino)?.links -= 1;
        self.journal.push(NameChange {
            entries: vec![(dir, name.to_owned(), None)],
        });
        Ok(())
    }

    /// Renames `dir/name` to `new_dir/new_name`, replacing what is there
    /// unless `no_replace`.
    pub fn rename(
        &mut self,
        dir: u64,
        name: &OsStr,
        new_dir: u64,
        new_name: &OsStr,
        no_replace: bool,
    ) -> Result<(), Errno> {
        let ino = *self.live_entries(dir)?.get(name).ok_or(libc::ENOENT)?;
        let replaced = self.live_entries(new_dir)?.get(new_name).copied();
        if replaced == Some(ino) {
            return Ok(());
        }
        if let Some(replaced) = replaced {
            if no_replace {
                return Err(libc::EEXIST);
            }
            match (self.node(ino)?.kind(), &self.node(replaced)?.body) {
                (Kind::File, Body::Dir { .. }) => return Err(libc::EISDIR),
                (Kind::Dir, Body::File { .. }) => return Err(libc::ENOTDIR),
                (Kind::Dir, Body::Dir { live, .. }) if !live.is_empty() => {
                    return Err(libc::ENOTEMPTY)
                }
                _ => {}
            }
            self.node_mut(replaced)?.links -= 1;
        }
        self.live_entries_mut(dir)?.remove(name);
        self.live_entries_mut(new_dir)?
            .insert(new_name.to_owned(), ino);
        self.journal.push(NameChange {
            entries: vec![
                (dir, name.to_owned(), None),
                (new_dir, new_name.to_owned(), Some(ino)),
            ],
        });
        Ok(())
    }

    pub fn read(&self, ino: u64, offset: u64, size: u64) -> Result<Vec<u8>, Errno> {
        match &self.node(ino)?.body {
            Body::File { live, .. } => Ok(live.read(offset, size)),
            Body::Dir { .. } => Err(libc::EISDIR),
        }
    }

    pub fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<(), Errno> {
        let (live, dirty) = self.file_mut(ino)?;
        live.write(offset, data, dirty);
        Ok(())
    }

    pub fn set_len(&mut self, ino: u64, len: u64) -> Result<(), Errno> {
        let (live, dirty) = self.file_mut(ino)?;
        live.set_len(len, dirty);
        Ok(())
    }

    /// `fallocate` mode 0: the file is at least `offset + len` long.
    pub fn allocate(&mut self, ino: u64, offset: u64, len: u64) -> Result<(), Errno> {
        let end = offset.checked_add(len).ok_or(libc::EFBIG)?;
        let (live, dirty) = self.file_mut(ino)?;
        if end > live.len {
            live.set_len(end, dirty);
        }
        Ok(())
    }

    pub fn set_perm(&mut self, ino: u64, perm: u16) -> Result<(), Errno> {
        self.node_mut(ino)?.perm = perm & 0o7777;
        Ok(())
    }

    /// The durability point: `fsync`, `fdatasync` and `msync(MS_SYNC)` of
    /// a file, `fsync` of a directory. A file's bytes and length become
    /// durable; the journal is made durable up to and including the last
    /// change that names `ino`, or, for a directory, that adds or removes
    /// one of its entries. Nothing after a cut.
    pub fn sync(&mut self, ino: u64) -> Result<(), Errno> {
        let node = self.nodes.get_mut(&ino).ok_or(libc::ENOENT)?;
        if !self.powered {
            self.stats.syncs_after_cut += 1;
            return Ok(());
        }
        self.stats.syncs += 1;
        let last = match &mut node.body {
            Body::File {
                live,
                durable,
                dirty,
            } => {
                for &index in dirty.iter() {
                    match live.pages.get(&index) {
                        Some(page) => durable.pages.insert(index, page.clone()),
                        None => durable.pages.remove(&index),
                    };
                }
                durable.len = live.len;
                self.stats.pages_made_durable += dirty.len() as u64;
                dirty.clear();
                self.journal.iter().rposition(|change| change.names(ino))
            }
            Body::Dir { .. } => self
                .journal
                .iter()
                .rposition(|change| change.edits(ino) || change.names(ino)),
        };
        if let Some(last) = last {
            for change in self.journal.drain(..=last) {
                for (dir, name, target) in change.entries {
                    let Some(Body::Dir { durable, .. }) =
                        self.nodes.get_mut(&dir).map(|node| &mut node.body)
                    else {
                        unreachable!("journal entry in {dir}, not a directory")
                    };
                    match target {
                        Some(target) => durable.insert(name, target),
                        None => durable.remove(&name),
                    };
                }
            }
        }
        if let Some((target, syncs)) = &mut self.cut_after {
            if *target == ino {
                *syncs -= 1;
                if *syncs == 0 {
                    self.cut_after = None;
                    self.powered = false;
                }
            }
        }
        Ok(())
    }

    /// Whether the power is on (no cut since the last power cycle).
    pub fn powered(&self) -> bool {
        self.powered
    }

    /// Arms a cut right after the `syncs`-th sync of `path` (relative to
    /// the root) from now: that sync is made durable, nothing after it.
    pub fn cut_after_syncs(&mut self, path: &std::path::Path, syncs: u32) -> Result<(), Errno> {
        assert!(syncs > 0);
        let mut ino = ROOT;
        for part in path.iter() {
            ino = *self.live_entries(ino)?.get(part).ok_or(libc::ENOENT)?;
        }
        self.cut_after = Some((ino, syncs));
        Ok(())
    }

    /// The power fails: from now on nothing becomes durable. The kernel
    /// and the processes above carry on with the live state until the
    /// file system is unmounted. Returns what the failure loses: each file
    /// with pages or a length not durable (path, pages), and the name
    /// changes not durable.
    pub fn cut_power(&mut self) -> Unsynced {
        self.powered = false;
        let mut paths = HashMap::from([(ROOT, String::new())]);
        let mut stack = vec![ROOT];
        while let Some(dir) = stack.pop() {
            if let Body::Dir { live, .. } = &self.nodes[&dir].body {
                for (name, &ino) in live {
                    paths.insert(ino, format!("{}/{}", paths[&dir], name.to_string_lossy()));
                    stack.push(ino);
                }
            }
        }
        let mut files: Vec<(String, usize)> = self
            .nodes
            .iter()
            .filter_map(|(ino, node)| match &node.body {
                Body::File {
                    live,
                    durable,
                    dirty,
                } if !dirty.is_empty() || live.len != durable.len => {
                    let path = paths
                        .get(ino)
                        .cloned()
                        .unwrap_or(format!("(inode {ino}, unlinked)"));
                    Some((path, dirty.len()))
                }
                _ => None,
            })
            .collect();
        files.sort();
        Unsynced {
            files,
            name_changes: self.journal.len(),
        }
    }

    /// The machine comes back: the live state becomes the durable one;
    /// nodes the durable tree does not reach are forgotten.
    pub fn power_cycle(&mut self) {
        let mut reachable = BTreeSet::new();
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            if reachable.insert(ino) {
                if let Body::Dir { durable, .. } = &self.nodes[&ino].body {
                    stack.extend(durable.values());
                }
            }
        }
        self.nodes.retain(|ino, _| reachable.contains(ino));
        let mut links: HashMap<u64, u32> = HashMap::from([(ROOT, 1)]);
        for node in self.nodes.values_mut() {
            match &mut node.body {
                Body::File {
                    live,
                    durable,
                    dirty,
                } => {
                    *live = durable.clone();
                    dirty.clear();
                }
                Body::Dir { live, durable } => {
                    *live = durable.clone();
                    for ino in durable.values() {
                        *links.entry(*ino).or_default() += 1;
                    }
                }
            }
        }
        for (ino, node) in &mut self.nodes {
            node.links = links[ino];
        }
        self.journal.clear();
        self.powered = true;
        self.cut_after = None;
        self.stats.power_cycles += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> &OsStr {
        OsStr::new(text)
    }

    fn read_all(disk: &Disk, ino: u64) -> Vec<u8> {
        disk.read(ino, 0, u64::MAX).unwrap()
    }

    #[test]
    fn unsynced_bytes_and_lengths_are_lost_synced_ones_kept() {
        let mut disk = Disk::new();
        let file = disk.create(ROOT, name("f"), Kind::File, 0o644).unwrap().ino;
        disk.write(file, 0, b"first").unwrap();
        disk.write(file, 3 * PAGE_BYTES - 2, b"across").unwrap();
        disk.sync(file).unwrap();
        disk.write(file, 0, b"FIRST").unwrap();
        disk.write(file, 10 * PAGE_BYTES, b"far").unwrap();
        disk.cut_power();
        disk.write(file, 1, b"after the cut").unwrap();
        disk.sync(file).unwrap();
        disk.power_cycle();
        let file = disk.lookup(ROOT, name("f")).unwrap();
        assert_eq!(file.size, 3 * PAGE_BYTES + 4);
        let bytes = read_all(&disk, file.ino);
        assert_eq!(&bytes[..5], b"first");
        assert_eq!(&bytes[3 * PAGE_BYTES as usize - 2..], b"across");
        assert!(bytes[5..3 * PAGE_BYTES as usize - 2]
            .iter()
            .all(|&b| b == 0));
        assert_eq!(disk.stats().syncs_after_cut, 1);
    }

    #[test]
    fn truncation_is_durable_at_a_sync_only() {
        let mut disk = Disk::new();
        let file = disk.create(ROOT, name("f"), Kind::File, 0o644).unwrap().ino;
        disk.write(file, 0, &[7; 3 * PAGE_BYTES as usize]).unwrap();
        disk.sync(file).unwrap();
        disk.set_len(file, PAGE_BYTES + 1).unwrap();
        disk.set_len(file, 3 * PAGE_BYTES).unwrap();
        assert!(read_all(&disk, file)[PAGE_BYTES as usize + 1..]
            .iter()
            .all(|&b| b == 0));
        disk.cut_power();
        disk.power_cycle();
        assert_eq!(read_all(&disk, file), vec![7; 3 * PAGE_BYTES as usize]);
        disk.set_len(file, PAGE_BYTES + 1).unwrap();
        disk.sync(file).unwrap();
        disk.cut_power();
        disk.power_cycle();
        assert_eq!(read_all(&disk, file), vec![7; PAGE_BYTES as usize + 1]);
    }

    #[test]
    fn names_are_durable_when_their_file_or_directory_is_synced() {
        let mut disk = Disk::new();
        let dir = disk.create(ROOT, name("d"), Kind::Dir, 0o755).unwrap().ino;
        let listed = disk
            .create(dir, name("listed"), Kind::File, 0o644)
            .unwrap()
            .ino;
        disk.write(listed, 0, b"l").unwrap();
        let synced = disk
            .create(dir, name("synced"), Kind::File, 0o644)
            .unwrap()
            .ino;
        disk.write(synced, 0, b"s").unwrap();
        disk.sync(synced).unwrap();
        let lost = disk
            .create(dir, name("lost"), Kind::File, 0o644)
            .unwrap()
            .ino;
        disk.write(lost, 0, b"x").unwrap();
        disk.cut_power();
        disk.power_cycle();
        // The file's sync made its name durable, and the directory that
        // holds it (earlier in the journal); the name created before it
        // too (a journal commits in order), with no bytes: they were
        // never synced; the name created after it is gone.
        assert_eq!(
            read_all(&disk, disk.lookup(dir, name("synced")).unwrap().ino),
            b"s"
        );
        assert_eq!(disk.lookup(dir, name("listed")).unwrap().size, 0);
        assert_eq!(disk.lookup(dir, name("lost")).unwrap_err(), libc::ENOENT);

        // Unlinks and renames wait for a sync of their directory.
        disk.remove(dir, name("listed"), Kind::File).unwrap();
        disk.rename(dir, name("synced"), ROOT, name("moved"), false)
            .unwrap();
        disk.sync(synced).unwrap();
        disk.cut_power();
        disk.power_cycle();
        // The rename names `synced`: made durable by its sync, old name
        // and new together; the unlink before it in the journal, too.
        assert!(disk.lookup(dir, name("synced")).is_err());
        assert!(disk.lookup(dir, name("listed")).is_err());
        assert_eq!(
            read_all(&disk, disk.lookup(ROOT, name("moved")).unwrap().ino),
            b"s"
        );

        let temporary = disk
            .create(dir, name("tmp"), Kind::File, 0o644)
            .unwrap()
            .ino;
        disk.write(temporary, 0, b"new").unwrap();
        disk.sync(temporary).unwrap();
        disk.remove(ROOT, name("moved"), Kind::File).unwrap();
        disk.rename(dir, name("tmp"), dir, name("final"), false)
            .unwrap();
        disk.cut_power();
        disk.power_cycle();
        assert!(
            disk.lookup(ROOT, name("moved")).is_ok(),
            "unlink never synced"
        );
        assert!(disk.lookup(dir, name("tmp")).is_ok(), "rename never synced");
        assert!(disk.lookup(dir, name("final")).is_err());
        disk.rename(dir, name("tmp"), dir, name("final"), false)
            .unwrap();
        disk.sync(dir).unwrap();
        disk.cut_power();
        disk.power_cycle();
        assert_eq!(
            read_all(&disk, disk.lookup(dir, name("final")).unwrap().ino),
            b"new"
        );
        assert!(disk.lookup(dir, name("tmp")).is_err());
    }

    #[test]
    fn a_directory_never_synced_is_lost_with_everything_in_it() {
        let mut disk = Disk::new();
        let dir = disk.create(ROOT, name("d"), Kind::Dir, 0o755).unwrap().ino;
        let file = disk.create(dir, name("f"), Kind::File, 0o644).unwrap().ino;
        disk.write(file, 0, b"data").unwrap();
        disk.cut_power();
        disk.sync(file).unwrap();
        disk.power_cycle();
        assert!(disk.lookup(ROOT, name("d")).is_err());
        assert!(disk.list(ROOT).unwrap().is_empty());
    }

    fn images(disk: &Disk, ino: u64) -> (&Bytes, &Bytes) {
        match &disk.nodes[&ino].body {
            Body::File { live, durable, .. } => (live, durable),
            Body::Dir { .. } => panic!("{ino} is a directory"),
        }
    }

    /// The dirty-page bookkeeping: after any mix of writes (zeros among
    /// them), truncations and growths, a sync leaves the durable image
    /// equal to the live one, and a power cycle brings back the image of
    /// the last sync.
    #[test]
    fn a_sync_makes_the_durable_image_the_live_one() {
        let mut disk = Disk::new();
        let file = disk.create(ROOT, name("f"), Kind::File, 0o644).unwrap().ino;
        disk.sync(file).unwrap();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut random = |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        let mut last_synced = Bytes::default();
        for _ in 0..3000 {
            match random(6) {
                0 | 1 => {
                    let len = random(3 * PAGE_BYTES) as usize;
                    let byte = if random(3) == 0 {
                        0
                    } else {
                        random(255) as u8 + 1
                    };
                    disk.write(file, random(16 * PAGE_BYTES), &vec![byte; len])
                        .unwrap();
                }
                2 => disk.set_len(file, random(20 * PAGE_BYTES)).unwrap(),
                3 => disk
                    .allocate(file, random(16 * PAGE_BYTES), random(8 * PAGE_BYTES))
                    .unwrap(),
                4 => {
                    disk.sync(file).unwrap();
                    let (live, durable) = images(&disk, file);
                    assert_eq!(live, durable);
                    last_synced = live.clone();
                }
                _ => {
                    disk.cut_power();
                    disk.power_cycle();
                    assert_eq!(images(&disk, file).0, &last_synced);
                }
            }
            let (live, _) = images(&disk, file);
            assert!(live
                .pages
                .keys()
                .all(|&index| index * PAGE_BYTES < live.len));
            assert!(live.pages.values().all(|page| page.iter().any(|&b| b != 0)));
        }
    }

    #[test]
    fn an_armed_cut_comes_right_after_the_chosen_sync_of_the_chosen_file() {
        let mut disk = Disk::new();
        let dir = disk.create(ROOT, name("d"), Kind::Dir, 0o755).unwrap().ino;
        let file = disk.create(dir, name("f"), Kind::File, 0o644).unwrap().ino;
        let other = disk.create(dir, name("o"), Kind::File, 0o644).unwrap().ino;
        disk.cut_after_syncs(std::path::Path::new("d/f"), 2)
            .unwrap();
        disk.write(file, 0, b"one").unwrap();
        disk.sync(file).unwrap();
        disk.write(other, 0, b"other").unwrap();
        disk.sync(other).unwrap();
        assert!(disk.powered(), "another file's sync does not count");
        disk.write(file, 0, b"two").unwrap();
        disk.sync(file).unwrap();
        assert!(!disk.powered());
        disk.write(file, 0, b"three").unwrap();
        disk.sync(file).unwrap();
        disk.power_cycle();
        assert_eq!(
            read_all(&disk, disk.lookup(dir, name("f")).unwrap().ino),
            b"two"
        );
        assert_eq!(
            read_all(&disk, disk.lookup(dir, name("o")).unwrap().ino),
            b"other"
        );
        assert_eq!(
            disk.cut_after_syncs(std::path::Path::new("d/none"), 1),
            Err(libc::ENOENT)
        );
    }

    #[test]
    fn zero_pages_take_no_memory_and_read_back_as_zeros() {
        let mut disk = Disk::new();
        let file = disk.create(ROOT, name("f"), Kind::File, 0o644).unwrap().ino;
        disk.allocate(file, 0, 1 << 30).unwrap();
        disk.write(file, 0, &vec![0; 1 << 20]).unwrap();
        disk.write(file, 5, b"x").unwrap();
        disk.write(file, 5, b"\0").unwrap();
        assert_eq!(disk.attr(file).unwrap().blocks, 0);
        assert_eq!(disk.attr(file).unwrap().size, 1 << 30);
        assert_eq!(disk.read(file, (1 << 30) - 2, 10).unwrap(), vec![0, 0]);
    }
}
