//! What every `engram-bench` command does around its run: quote the command
//! line in the report, create the `--json` file before the run (so a bad
//! path fails at once, not after an hour of measuring), put the stores in a
//! fresh temporary directory under the current one unless `--dir` names a
//! directory, and print the results: the table on standard output, the
//! JSON in its file, or with `--json -` the JSON on standard output and the
//! table on standard error.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::error::IoError;

/// The command as typed, for the report (`engram-bench engine --quick`).
pub fn command_line() -> String {
    let mut words = std::env::args();
    let program = words
        .next()
        .map(|path| {
            Path::new(&path)
                .file_name()
                .map_or(path.clone(), |name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "engram-bench".into());
    std::iter::once(program)
        .chain(words)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Numbers from a debug build are not worth quoting: say so before the run.
pub fn warn_if_debug_build() {
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: this is a debug build; build with `cargo build --release -p engram-bench` \
             for numbers worth quoting"
        );
    }
}

/// Where `--json` sends the report.
pub enum ReportOutput {
    /// No `--json`: the table on standard output.
    TableOnly,
    /// `--json -`: the JSON on standard output, the table on standard error.
    JsonToStdout,
    /// `--json FILE`: the table on standard output, the JSON in the file,
    /// created (empty) before the run.
    JsonToFile { file: File, path: PathBuf },
}

impl ReportOutput {
    /// Follows `--json`, creating its file now.
    pub fn create(json: Option<&Path>) -> Result<ReportOutput, IoError> {
        Ok(match json {
            None => ReportOutput::TableOnly,
            Some(path) if path == Path::new("-") => ReportOutput::JsonToStdout,
            Some(path) => ReportOutput::JsonToFile {
                file: File::create(path)
                    .map_err(|e| IoError::new("creating the JSON report", path, e))?,
                path: path.to_path_buf(),
            },
        })
    }

    /// Prints `table` and writes the JSON `json` makes where `--json` said.
    pub fn write(self, table: &str, json: impl FnOnce() -> String) -> Result<(), IoError> {
        match self {
            ReportOutput::TableOnly => print!("{table}"),
            ReportOutput::JsonToStdout => {
                println!("{}", json());
                eprint!("{table}");
            }
            ReportOutput::JsonToFile { mut file, path } => {
                print!("{table}");
                writeln!(file, "{}", json())
                    .map_err(|e| IoError::new("writing the JSON report", path, e))?;
            }
        }
        Ok(())
    }
}

/// Where a run's stores (or servers' data) go: the directory `--dir` names,
/// or a fresh temporary one under the current directory, removed by
/// [`RunDir::close`], and also when dropped (a run that fails leaves
/// nothing behind unless [`RunDir::keep`] says so).
pub struct RunDir {
    path: PathBuf,
    temporary: Option<TempDir>,
}

impl RunDir {
    /// `--dir` if given (created if missing), else a new temporary directory
    /// whose name starts with `prefix`.
    pub fn new(dir: Option<&Path>, prefix: &str) -> Result<RunDir, IoError> {
        match dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| IoError::new("creating", dir, e))?;
                Ok(RunDir {
                    path: dir.to_path_buf(),
                    temporary: None,
                })
            }
            None => {
                let temporary = tempfile::Builder::new()
                    .prefix(prefix)
                    .tempdir_in(".")
                    .map_err(|e| IoError::new("creating a temporary directory in", ".", e))?;
                Ok(RunDir {
                    path: temporary.path().to_path_buf(),
                    temporary: Some(temporary),
                })
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the directory is a temporary one this run made.
    pub fn is_temporary(&self) -> bool {
        self.temporary.is_some()
    }

    /// Removes the directory if it is a temporary one; `--dir` stays.
    pub fn close(self) -> Result<(), IoError> {
        match self.temporary {
            Some(temporary) => temporary
                .close()
                .map_err(|e| IoError::new("removing", &self.path, e)),
            None => Ok(()),
        }
    }

    /// Leaves the directory in place, temporary or not.
    pub fn keep(self) -> PathBuf {
        if let Some(temporary) = self.temporary {
            let _ = temporary.keep();
        }
        self.path
    }
}

/// Removes a store directory an earlier run (or step) left, if there is
/// one: every measured store starts from nothing.
pub(crate) fn remove_if_present(dir: &Path) -> Result<(), IoError> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(IoError::new("removing store directory", dir, e))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (The temporary directory's removal is tested through the binary:
    /// tests/cli.rs.)
    #[test]
    fn a_named_run_dir_is_created_and_stays() {
        let parent = tempfile::tempdir().unwrap();
        let named = parent.path().join("named");
        let run_dir = RunDir::new(Some(&named), "unused-").unwrap();
        assert!(!run_dir.is_temporary());
        assert!(named.is_dir(), "--dir is created");
        run_dir.close().unwrap();
        assert!(named.is_dir(), "--dir stays");
    }

    #[test]
    fn a_bad_json_path_fails_before_the_run() {
        let parent = tempfile::tempdir().unwrap();
        let path = parent.path().join("no-such-dir").join("report.json");
        let error = ReportOutput::create(Some(&path)).err().unwrap();
        assert_eq!(error.action, "creating the JSON report");
        assert!(matches!(
            ReportOutput::create(Some(Path::new("-"))),
            Ok(ReportOutput::JsonToStdout)
        ));
    }
}
