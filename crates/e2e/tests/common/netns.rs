//! A private network for a group's nodes: one network namespace per node,
//! each joined by a veth pair to a bridge in the test's own namespace
//! (which has an address on the same subnet, so the test's clients reach
//! every node). Faults act on the host side of a node's veth: `cut` takes
//! the link down (nothing in or out: a partition), `heal` brings it back,
//! `shape` puts a token bucket on it (a slow link: 2 Mbit/s, packets past
//! 20 ms of queue dropped), which is what this kernel offers for delay and
//! loss (it has no `netem`). Everything is removed on drop; nothing is
//! sent anywhere but the namespaces made here.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct Netns {
    tag: String,
    subnet: String,
    nodes: usize,
}

/// Runs `program` (`ip`, `tc`) with `args`; its error output otherwise.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn tc(args: &[&str]) -> Result<(), String> {
    run("tc", args)
}

impl Netns {
    /// Makes the bridge and `nodes` namespaces. Needs root and iproute2.
    pub fn create(nodes: usize) -> Result<Netns, String> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = std::process::id() * 16 + COUNTER.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{:05x}", n & 0xF_FFFF);
        let subnet = format!("10.{}.{}", 100 + (n >> 8) % 100, n % 256);
        let net = Netns { tag, subnet, nodes };
        let bridge = net.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}.1/24", net.subnet),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        for i in 0..nodes {
            let (ns, host, inner) = (net.namespace(i), net.host_link(i), net.inner_link(i));
            ip(&["netns", "add", &ns])?;
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &inner])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &host, "master", &bridge])?;
            ip(&["link", "set", &host, "up"])?;
            let inside = |args: &[&str]| {
                let mut all = vec!["netns", "exec", &ns, "ip"];
                all.extend_from_slice(args);
                ip(&all)
            };
            inside(&[
                "addr",
                "add",
                &format!("{}/24", net.address(i)),
                "dev",
                &inner,
            ])?;
            inside(&["link", "set", &inner, "up"])?;
            inside(&["link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn bridge(&self) -> String {
        format!("egb{}", self.tag)
    }

    fn namespace(&self, i: usize) -> String {
        format!("eg{}n{i}", self.tag)
    }

    fn host_link(&self, i: usize) -> String {
        format!("egh{}{i}", self.tag)
    }

    fn inner_link(&self, i: usize) -> String {
        format!("egi{}{i}", self.tag)
    }

    /// Node `i`'s address.
    pub fn address(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, 10 + i)
    }

    /// The command prefix that runs a program in node `i`'s namespace.
    pub fn exec(&self, i: usize) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.namespace(i),
        ]
    }

    /// Node `i` hears and says nothing.
    pub fn cut(&self, i: usize) {
        ip(&["link", "set", &self.host_link(i), "down"]).unwrap();
    }

    pub fn heal(&self, i: usize) {
        ip(&["link", "set", &self.host_link(i), "up"]).unwrap();
    }

    /// Node `i`'s link slows to 2 Mbit/s, dropping what queues past 20 ms
    /// (`on`), or is plain again.
    pub fn shape(&self, i: usize, on: bool) {
        let link = self.host_link(i);
        if on {
            tc(&[
                "qdisc", "add", "dev", &link, "root", "tbf", "rate", "2mbit", "burst", "8kbit",
                "latency", "20ms",
            ])
            .unwrap();
        } else {
            let _ = tc(&["qdisc", "del", "dev", &link, "root"]);
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for i in 0..self.nodes {
            // The namespace takes its veth end, and the pair, with it.
            let _ = ip(&["netns", "del", &self.namespace(i)]);
            let _ = ip(&["link", "del", &self.host_link(i)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}
