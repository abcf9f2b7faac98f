//! SLOWLOG and LATENCY: what was slow, and how long commands take.

use super::{
    err, int_arg, lowercase, unknown_subcommand, wrong_sub_arity, CmdResult, CommandSpec, Ctx,
    Group, ADMIN,
};
use crate::resp::Args;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("server");
    vec![
        g.keyless(
            "slowlog",
            -2,
            ADMIN,
            slowlog,
            "Reads or resets the slow log (GET LEN RESET).",
        ),
        g.keyless(
            "latency",
            -2,
            ADMIN,
            latency,
            "Reads the latency monitor and the per-command latency histograms \
             (LATEST HISTORY RESET DOCTOR GRAPH HISTOGRAM).",
        ),
    ]
}

pub(super) fn help(ctx: &mut Ctx, lines: &[&str]) {
    ctx.out.array(lines.len());
    for line in lines {
        ctx.out.simple(line);
    }
}

fn slowlog(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    let log = &ctx.shared.slowlog;
    match lowercase(sub).as_str() {
        "get" if args.len() <= 3 => {
            let count = match args.len() {
                3 => match int_arg(args.get(2))? {
                    -1 => None,
                    n if n < -1 => {
                        return Err(err("ERR count should be greater than or equal to -1"))
                    }
                    n => Some(n as usize),
                },
                _ => Some(10),
            };
            let out = &mut *ctx.out;
            log.newest(count, |entries| {
                out.array(entries.len());
                for entry in entries {
                    out.array(6);
                    out.int(entry.id as i64);
                    out.int(entry.unix_time as i64);
                    out.int(entry.usec as i64);
                    out.array(entry.args.len());
                    for arg in &entry.args {
                        out.bulk(arg);
                    }
                    out.bulk(entry.client_addr.as_bytes());
                    out.bulk(entry.client_name.as_bytes());
                }
            });
        }
        "len" if args.len() == 2 => ctx.out.int(log.len() as i64),
        "reset" if args.len() == 2 => {
            log.reset();
            ctx.out.ok();
        }
        "help" if args.len() == 2 => help(
            ctx,
            &[
                "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GET [<count>]",
                "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                "    Entries are made of:",
                "    id, timestamp, time in microseconds, arguments array, client IP and port,",
                "    client name",
                "LEN",
                "    Return the length of the slowlog.",
                "RESET",
                "    Reset the slowlog.",
                "HELP",
                "    Print this help.",
            ],
        ),
        "get" | "len" | "reset" | "help" => return Err(wrong_sub_arity("slowlog", sub)),
        _ => return Err(unknown_subcommand("slowlog", sub)),
    }
    Ok(())
}

fn latency(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    let monitor = ctx.shared.latency.clone();
    let rest: Vec<String> = args.iter().skip(2).map(lowercase).collect();
    match lowercase(sub).as_str() {
        "latest" if args.len() == 2 => {
            let latest = monitor.latest();
            ctx.out.array(latest.len());
            for (name, sample, max) in latest {
                ctx.out.array(4);
                ctx.out.bulk(name.as_bytes());
                ctx.out.int(sample.unix_time as i64);
                ctx.out.int(sample.ms as i64);
                ctx.out.int(max as i64);
            }
        }
        "history" if args.len() == 3 => {
            let samples = monitor.history(&rest[0]);
            ctx.out.array(samples.len());
            for sample in samples {
                ctx.out.array(2);
                ctx.out.int(sample.unix_time as i64);
                ctx.out.int(sample.ms as i64);
            }
        }
        "reset" => ctx.out.int(monitor.reset(&rest) as i64),
        "graph" if args.len() == 3 => {
            let samples = monitor.history(&rest[0]);
            if samples.is_empty() {
                return Err(err(format!(
                    "ERR No samples available for event '{}'",
                    rest[0]
                )));
            }
            let high = samples.iter().map(|s| s.ms).max().unwrap_or(0);
            let low = samples.iter().map(|s| s.ms).min().unwrap_or(0);
            let mut text = format!("{} - high {high} ms, low {low} ms\n\n", rest[0]);
            for sample in &samples {
                let width = (sample.ms * 60).checked_div(high).unwrap_or(0) as usize;
                text.push_str(&format!(
                    "{:>10} {:>6} ms {}\n",
                    sample.unix_time,
                    sample.ms,
                    "#".repeat(width.max(1))
                ));
            }
            ctx.out.verbatim(&text);
        }
        "doctor" if args.len() == 2 => {
            let latest = monitor.latest();
            let threshold = monitor
                .threshold_ms
                .load(std::sync::atomic::Ordering::Relaxed);
            let mut text = String::new();
            if threshold == 0 {
                text.push_str(
                    "The latency monitor is off: CONFIG SET latency-monitor-threshold <ms> \
                     turns it on for events at least that long.\n",
                );
            } else if latest.is_empty() {
                text.push_str(&format!(
                    "No latency event of {threshold} ms or more was observed since the last \
                     reset.\n"
                ));
            } else {
                text.push_str(&format!(
                    "Events of {threshold} ms or more since the last reset:\n\n"
                ));
                for (name, sample, max) in latest {
                    let samples = monitor.history(name);
                    let mean = samples.iter().map(|s| s.ms).sum::<u64>() / samples.len() as u64;
                    text.push_str(&format!(
                        "- {name}: {} samples, latest {} ms at {}, worst {max} ms, mean {mean} ms\n",
                        samples.len(),
                        sample.ms,
                        sample.unix_time
                    ));
                }
                text.push_str(
                    "\n`command` and `fast-command` are single slow commands (see SLOWLOG GET); \
                     `expire-cycle` is the background deletion of expired keys.\n",
                );
            }
            ctx.out.verbatim(&text);
        }
        "histogram" => {
            let histograms = ctx.shared.stats.commands.histograms(&rest);
            let out = &mut *ctx.out;
            out.map(histograms.len());
            for h in histograms {
                out.bulk(h.name.as_bytes());
                out.map(2);
                out.bulk(b"calls");
                out.int(h.calls as i64);
                out.bulk(b"histogram_usec");
                out.map(h.buckets.len());
                for (bound, cumulative) in h.buckets {
                    out.int(bound as i64);
                    out.int(cumulative as i64);
                }
            }
        }
        "help" if args.len() == 2 => help(
            ctx,
            &[
                "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "    Return a human readable latency analysis report.",
                "GRAPH <event>",
                "    Return a latency graph for the <event> using ASCII characters.",
                "HISTORY <event>",
                "    Return time-latency samples for the <event> class.",
                "LATEST",
                "    Return the latest latency samples for all events.",
                "RESET [<event> ...]",
                "    Reset latency data of one or more <event> classes.",
                "    (default: reset all data for all event classes)",
                "HISTOGRAM [COMMAND ...]",
                "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
                "    If no commands are specified then all histograms are replied.",
                "HELP",
                "    Print this help.",
            ],
        ),
        "latest" | "history" | "graph" | "doctor" | "help" => {
            return Err(wrong_sub_arity("latency", sub))
        }
        _ => return Err(unknown_subcommand("latency", sub)),
    }
    Ok(())
}
