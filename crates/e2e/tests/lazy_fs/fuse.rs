//! The kernel's requests, turned into [`Disk`] calls. Stateless apart from
//! the disk: file handles are all 0, an inode is its own handle.
//!
//! Files are opened with `FOPEN_KEEP_CACHE` (only this kernel changes
//! them, so its page cache stays valid across opens) and never with
//! `FOPEN_DIRECT_IO`, so shared writable mappings work and their dirty
//! pages come back as WRITE requests. No writeback cache is negotiated
//! (fuser does not ask for it): a `write(2)` reaches the disk before it
//! returns. Either way a write is only live until a sync.

use std::ffi::OsStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use super::disk::{Attr, Disk, Kind, PAGE_BYTES};

/// How long the kernel may cache names and attributes: nothing but this
/// kernel changes them.
const TTL: Duration = Duration::from_secs(60);

pub struct LazyFuse {
    pub disk: Arc<Mutex<Disk>>,
    /// Print every request (`ENGRAM_LAZY_FS_TRACE=1`).
    pub trace: bool,
}

fn errno(value: i32) -> Errno {
    Errno::from_i32(value)
}

fn file_attr(attr: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(attr.ino),
        size: attr.size,
        blocks: attr.blocks,
        atime: attr.modified_at,
        mtime: attr.modified_at,
        ctime: attr.modified_at,
        crtime: attr.modified_at,
        kind: file_type(attr.kind),
        perm: attr.perm,
        nlink: attr.links,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: PAGE_BYTES as u32,
        flags: 0,
    }
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
    }
}

impl LazyFuse {
    fn trace(&self, what: std::fmt::Arguments) {
        if self.trace {
            eprintln!("lazy_fs: {what}");
        }
    }

    fn disk(&self) -> std::sync::MutexGuard<'_, Disk> {
        self.disk.lock().expect("the lazy disk's lock")
    }

    fn entry(&self, reply: ReplyEntry, result: Result<Attr, i32>) {
        match result {
            Ok(attr) => reply.entry(&TTL, &file_attr(&attr), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn empty(reply: ReplyEmpty, result: Result<(), i32>) {
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }
}

impl Filesystem for LazyFuse {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.trace(format_args!("lookup {parent} {name:?}"));
        let result = self.disk().lookup(parent.0, name);
        self.entry(reply, result);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.disk().attr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &file_attr(&attr)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.trace(format_args!("setattr {ino} mode {mode:?} size {size:?}"));
        let mut disk = self.disk();
        let result = (|| {
            if let Some(mode) = mode {
                disk.set_perm(ino.0, mode as u16)?;
            }
            if let Some(size) = size {
                disk.set_len(ino.0, size)?;
            }
            disk.attr(ino.0)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &file_attr(&attr)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        self.trace(format_args!("mknod {parent} {name:?}"));
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        let result = self
            .disk()
            .create(parent.0, name, Kind::File, (mode & !umask) as u16);
        self.entry(reply, result);
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.trace(format_args!("mkdir {parent} {name:?}"));
        let result = self
            .disk()
            .create(parent.0, name, Kind::Dir, (mode & !umask) as u16);
        self.entry(reply, result);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.trace(format_args!("unlink {parent} {name:?}"));
        Self::empty(reply, self.disk().remove(parent.0, name, Kind::File));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.trace(format_args!("rmdir {parent} {name:?}"));
        Self::empty(reply, self.disk().remove(parent.0, name, Kind::Dir));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.trace(format_args!(
            "rename {parent} {name:?} -> {newparent} {newname:?}"
        ));
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            return reply.error(Errno::EINVAL);
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        Self::empty(
            reply,
            self.disk()
                .rename(parent.0, name, newparent.0, newname, no_replace),
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.trace(format_args!("open {ino}"));
        match self.disk().attr(ino.0) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        self.trace(format_args!("create {parent} {name:?}"));
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        match self
            .disk()
            .create(parent.0, name, Kind::File, (mode & !umask) as u16)
        {
            Ok(attr) => reply.created(
                &TTL,
                &file_attr(&attr),
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.disk().read(ino.0, offset, size as u64) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.trace(format_args!("write {ino} {offset}+{}", data.len()));
        match self.disk().write(ino.0, offset, data) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// `close(2)`: not a durability point.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.trace(format_args!("fsync {ino}"));
        Self::empty(reply, self.disk().sync(ino.0));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listed = match self.disk().list(ino.0) {
            Ok(listed) => listed,
            Err(e) => return reply.error(errno(e)),
        };
        let dots = [
            (".".into(), ino.0, Kind::Dir),
            ("..".into(), ino.0, Kind::Dir),
        ];
        for (index, (name, entry, kind)) in dots
            .into_iter()
            .chain(listed)
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(INodeNo(entry), index as u64 + 1, file_type(kind), &name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.trace(format_args!("fsyncdir {ino}"));
        Self::empty(reply, self.disk().sync(ino.0));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // A roomy disk: 4 TiB, half free.
        reply.statfs(
            1 << 30,
            1 << 29,
            1 << 29,
            1 << 20,
            1 << 19,
            PAGE_BYTES as u32,
            255,
            PAGE_BYTES as u32,
        );
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    /// `posix_fallocate` (mode 0) grows the file; other modes are refused,
    /// as many file systems refuse them (Engram uses none).
    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.trace(format_args!(
            "fallocate {ino} {offset}+{length} mode {mode}"
        ));
        if mode != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        Self::empty(reply, self.disk().allocate(ino.0, offset, length));
    }
}
