//! A crashed store's files, copied so that every timed recovery starts from
//! the same crash image. Recovery may change the files it reads (RocksDB
//! flushes the WAL it replayed into a table file, Engram retires the
//! superseded versions it finds), so recovering the same directory a second
//! time would time a different, easier job.

use std::path::Path;

use crate::error::{BenchError, Result};

/// Copies the directory tree `from` to `to` (which must not exist): the
/// directories and regular files a store keeps, nothing else.
pub fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir(to).map_err(|e| BenchError::io("creating crash image", to, e))?;
    let entries = std::fs::read_dir(from).map_err(|e| BenchError::io("listing", from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| BenchError::io("listing", from, e))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry
            .file_type()
            .map_err(|e| BenchError::io("inspecting", &source, e))?;
        if kind.is_dir() {
            copy(&source, &target)?;
        } else if kind.is_file() {
            std::fs::copy(&source, &target)
                .map_err(|e| BenchError::io("copying into crash image", &source, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_files_and_subdirectories() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        std::fs::create_dir_all(store.join("sub")).unwrap();
        std::fs::write(store.join("data"), b"records").unwrap();
        std::fs::write(store.join("sub/log"), b"tail").unwrap();
        let image = dir.path().join("image");
        copy(&store, &image).unwrap();
        assert_eq!(std::fs::read(image.join("data")).unwrap(), b"records");
        assert_eq!(std::fs::read(image.join("sub/log")).unwrap(), b"tail");
        // An existing target is refused rather than merged into.
        assert!(matches!(copy(&store, &image), Err(BenchError::Io(_))));
    }
}
