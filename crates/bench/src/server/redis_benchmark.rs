//! Running redis-benchmark against one server and reading its `--csv`
//! output.
//!
//! One invocation runs every test for one (server, pipeline depth): the
//! tests run in redis-benchmark's own order (SET before GET before INCR
//! before MSET, whatever the order after `-t`), so GET reads keys SET wrote
//! a moment before. With `-r`, keys are drawn at random from the keyspace,
//! so GET hits only the share of the keyspace the SETs covered.
//!
//! redis-benchmark does not give up when it cannot connect (it retries
//! forever), so the run is watched: if the server exits or the run exceeds
//! its time limit, redis-benchmark is killed and the error says why.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::error::{Result, ServerBenchError};
use super::peers::{Peer, HOST};

/// One redis-benchmark command line, up to the server's port.
#[derive(Clone, Debug)]
pub struct Invocation {
    pub program: PathBuf,
    pub clients: u32,
    pub value_bytes: usize,
    pub keyspace: u64,
    pub requests: u64,
    /// redis-benchmark's test names, lower case: set, get, incr, mset, ...
    pub tests: Vec<String>,
    pub pipeline: u32,
}

impl Invocation {
    /// `-h 127.0.0.1 -p PORT -c 50 -d 200 -r 1000000 -n N -t set,get -P 16 --csv -q`
    pub fn args(&self, port: u16) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "-h".into(),
            HOST.into(),
            "-p".into(),
            port.to_string(),
            "-c".into(),
            self.clients.to_string(),
            "-d".into(),
            self.value_bytes.to_string(),
            "-r".into(),
            self.keyspace.to_string(),
            "-n".into(),
            self.requests.to_string(),
            "-t".into(),
            self.tests.join(","),
            "-P".into(),
            self.pipeline.to_string(),
        ];
        args.extend(["--csv".into(), "-q".into()]);
        args
    }

    /// The command line as a shell would take it (no argument needs quotes).
    pub fn display(&self, port: u16) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.args(port))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs against `server`, failing if the server exits meanwhile or the
    /// run takes longer than `timeout`.
    pub fn run(&self, server: &mut Peer, timeout: Duration) -> Result<Vec<CsvRow>> {
        let command = self.display(server.port);
        let mut child = Command::new(&self.program)
            .args(self.args(server.port))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| ServerBenchError::Spawn {
                program: self.program.display().to_string(),
                source,
            })?;
        // Drained on threads so a chatty run cannot fill a pipe and stall.
        let stdout = drain(child.stdout.take().expect("stdout is piped"));
        let stderr = drain(child.stderr.take().expect("stderr is piped"));
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(ServerBenchError::io(
                        "waiting for redis-benchmark against port",
                        server.port.to_string(),
                        e,
                    ));
                }
            }
            let failure = match server.check_alive("while redis-benchmark ran") {
                Err(e) => Some(e),
                Ok(()) if start.elapsed() > timeout => Some(ServerBenchError::BenchmarkTimeout {
                    system: server.system.name(),
                    seconds: timeout.as_secs(),
                    command: command.clone(),
                }),
                Ok(()) => None,
            };
            if let Some(failure) = failure {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failure);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = stdout.join().unwrap_or_default();
        let stderr = stderr.join().unwrap_or_default();
        if !status.success() {
            // A server that died makes redis-benchmark fail too ("Connection
            // reset by peer"): report the cause, with the server's log.
            server.check_alive("while redis-benchmark ran")?;
            return Err(ServerBenchError::Benchmark {
                system: server.system.name(),
                status: status.to_string(),
                command,
                stderr,
            });
        }
        let rows = parse_csv(&stdout)?;
        if rows.is_empty() {
            return Err(ServerBenchError::Benchmark {
                system: server.system.name(),
                status: "no results".into(),
                command,
                stderr,
            });
        }
        Ok(rows)
    }
}

/// One line of `redis-benchmark --csv`: one test's throughput and latency
/// percentiles, in milliseconds as redis-benchmark prints them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CsvRow {
    /// The label up to its first space: "MSET" for "MSET (10 keys)".
    pub test: String,
    /// The label as printed.
    pub label: String,
    /// Commands per second (an MSET of 10 keys is one command).
    pub ops_per_sec: f64,
    pub avg_ms: f64,
    pub min_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The columns needed from the header, in `CsvRow`'s order after the label.
const COLUMNS: [&str; 7] = [
    "rps",
    "avg_latency_ms",
    "min_latency_ms",
    "p50_latency_ms",
    "p95_latency_ms",
    "p99_latency_ms",
    "max_latency_ms",
];

/// Parses redis-benchmark's `--csv` output (Redis 6.2 and later):
///
/// ```text
/// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
/// "SET","327868.84","2.107","0.560","1.927","3.647","4.143","5.263"
/// ```
///
/// Columns are found by their header names, so a reordering or an added
/// column does not shift them. Blank lines are skipped; any other line that
/// is not a row is an error, as is a header without the latency columns
/// (Redis before 6.2 printed only `"SET","327868.84"`).
pub fn parse_csv(text: &str) -> Result<Vec<CsvRow>> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty());
    let Some((header_line, header)) = lines.next() else {
        return Ok(Vec::new());
    };
    let header = split_csv_line(header).map_err(|reason| ServerBenchError::Csv {
        line: header_line,
        reason,
    })?;
    let position = |name: &str| header.iter().position(|column| column == name);
    let test_column = position("test").ok_or_else(|| ServerBenchError::Csv {
        line: header_line,
        reason: format!(
            "expected a header naming the columns (\"test\",\"rps\",...; redis-benchmark \
             from Redis 6.2 on prints one), got {header:?}"
        ),
    })?;
    let mut columns = [0usize; COLUMNS.len()];
    for (slot, name) in columns.iter_mut().zip(COLUMNS) {
        *slot = position(name).ok_or_else(|| ServerBenchError::Csv {
            line: header_line,
            reason: format!(
                "the header has no {name} column (Redis 6.2 or later prints latency \
                 percentiles): {header:?}"
            ),
        })?;
    }
    let mut rows = Vec::new();
    for (line, text) in lines {
        let fields =
            split_csv_line(text).map_err(|reason| ServerBenchError::Csv { line, reason })?;
        if fields.len() != header.len() {
            return Err(ServerBenchError::Csv {
                line,
                reason: format!(
                    "{} fields where the header has {}: {text:?}",
                    fields.len(),
                    header.len()
                ),
            });
        }
        let mut numbers = [0f64; COLUMNS.len()];
        for ((number, &column), name) in numbers.iter_mut().zip(&columns).zip(COLUMNS) {
            let field = &fields[column];
            *number = field
                .parse::<f64>()
                .ok()
                .filter(|value| value.is_finite() && *value >= 0.0)
                .ok_or_else(|| ServerBenchError::Csv {
                    line,
                    reason: format!("{name} is {field:?}, not a number"),
                })?;
        }
        let label = fields[test_column].clone();
        let [ops_per_sec, avg_ms, min_ms, p50_ms, p95_ms, p99_ms, max_ms] = numbers;
        rows.push(CsvRow {
            test: label.split_whitespace().next().unwrap_or("").to_string(),
            label,
            ops_per_sec,
            avg_ms,
            min_ms,
            p50_ms,
            p95_ms,
            p99_ms,
            max_ms,
        });
    }
    Ok(rows)
}

/// Splits one CSV line: fields separated by commas, each bare or in double
/// quotes (a doubled quote inside stands for one).
fn split_csv_line(line: &str) -> std::result::Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err(format!("unterminated quote in {line:?}")),
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(c) => return Err(format!("{c:?} after a closing quote in {line:?}")),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field.trim().to_string());
                        return Ok(fields);
                    }
                    Some(',') => break,
                    Some(c) => field.push(c),
                }
            }
            fields.push(field.trim().to_string());
        }
    }
}

/// Whether `rows` include the test named `name` on the command line (`-t`):
/// "mset" names "MSET (10 keys)", "ping" names PING_INLINE and PING_MBULK,
/// "lrange" names the LRANGE_* tests.
pub fn covers(rows: &[CsvRow], name: &str) -> bool {
    rows.iter().any(|row| {
        row.test
            .to_ascii_lowercase()
            .starts_with(&name.to_ascii_lowercase())
    })
}

/// Reads a pipe to its end on a thread of its own.
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_split_on_commas_outside_quotes() {
        assert_eq!(
            split_csv_line(r#""a,b","c""d",3"#).unwrap(),
            ["a,b", "c\"d", "3"]
        );
        assert_eq!(split_csv_line("x,,y").unwrap(), ["x", "", "y"]);
        assert!(split_csv_line(r#""open"#).is_err());
        assert!(split_csv_line(r#""a"b"#).is_err());
    }

    #[test]
    fn the_command_line_matches_the_issue() {
        let invocation = Invocation {
            program: "redis-benchmark".into(),
            clients: 50,
            value_bytes: 200,
            keyspace: 1_000_000,
            requests: 200_000,
            tests: vec!["set".into(), "get".into()],
            pipeline: 16,
        };
        assert_eq!(
            invocation.display(7000),
            "redis-benchmark -h 127.0.0.1 -p 7000 -c 50 -d 200 -r 1000000 -n 200000 \
             -t set,get -P 16 --csv -q"
        );
    }
}
