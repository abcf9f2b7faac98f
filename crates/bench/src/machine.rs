//! The machine a report was measured on, so numbers are never quoted
//! without it (STYLE.md 10: report the ratio, the command and the machine).

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// `std::thread::available_parallelism`: the cores this process may use.
    pub cores: usize,
    /// What `uname -sr` prints, e.g. "Linux 6.8.0".
    pub kernel: String,
    /// The CPU's model name from /proc/cpuinfo.
    pub cpu: String,
}

impl Machine {
    pub fn this() -> Machine {
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: kernel(),
            cpu: cpu_model(),
        }
    }
}

/// The line the reports print under their command: "2 cores, AMD EPYC,
/// Linux 6.8.0".
impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} cores, {}, {}", self.cores, self.cpu, self.kernel)
    }
}

/// `uname -sr` without a libc call: Linux exposes both fields in /proc.
fn kernel() -> String {
    let read = |path| std::fs::read_to_string(path).map(|s: String| s.trim().to_string());
    match (
        read("/proc/sys/kernel/ostype"),
        read("/proc/sys/kernel/osrelease"),
    ) {
        (Ok(name), Ok(release)) => format!("{name} {release}"),
        _ => std::env::consts::OS.to_string(),
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}
