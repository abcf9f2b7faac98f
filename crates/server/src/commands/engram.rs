//! Engram's own commands (no Redis equivalent): ENGRAM.SCRUB.
//!
//! `ENGRAM.SCRUB` brings the integrity layer's redundancy up to date, then
//! verifies every page of the data file against its checksum and every
//! stripe against its parity, rebuilding what parity can rebuild (the
//! engine's `Store::scrub_now`). It blocks the calling client for as long
//! as that takes (seconds for gigabytes); other clients are served
//! meanwhile. The reply is a map (RESP3) or a flat array of name, value
//! pairs (RESP2):
//!
//! | field | value |
//! |---|---|
//! | `pages_checked` | pages verified |
//! | `pages_stale` | pages skipped because they were written during the scrub |
//! | `corrupt_pages` | pages that did not match their checksum |
//! | `repaired_pages` | how many of those were rebuilt from parity |
//! | `unrepairable_pages` | pages known corrupt that parity could not rebuild (two bad pages in one stripe) |
//! | `parity_rewritten` | parity pages found stale or wrong and rewritten |
//! | `metadata_rebuilt` | checksum pages found damaged and rebuilt from the data |
//! | `affected_keys` | keys with data on an unrepairable page, named as clients see them (`db<N>:<key>` outside database 0); `offset:0x...` for a record whose key cannot be read |
//! | `duration_ms` | how long the scrub took |
//!
//! Reads of an affected key fail with an error until the key is rewritten
//! or deleted; every other key stays readable. Inside MULTI the command is
//! queued and refused at EXEC (the transaction's locks would be held for
//! the whole scrub).

use super::{err, run_blocking, CmdResult, CommandSpec, Ctx, Group, ADMIN};
use crate::resp::Args;

/// The reply to ENGRAM.SCRUB on a server started with `--integrity off`.
pub const INTEGRITY_OFF: &str = "ERR integrity is off (start with --integrity lazy or inline)";

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("engram");
    vec![g.keyless(
        "engram.scrub",
        1,
        ADMIN,
        scrub,
        "Verifies every page of the data file against its checksum and parity, \
         repairs what parity can, and names the keys on pages it cannot.",
    )]
}

fn scrub(ctx: &mut Ctx, _args: Args) -> CmdResult {
    if ctx.exec.is_some() {
        // EXEC holds the stripes of its queued keys: writers to them would
        // wait out the whole scrub.
        return Err(err("ERR ENGRAM.SCRUB is not allowed inside MULTI/EXEC"));
    }
    let store = ctx.ks().store();
    if store.integrity_stats().is_none() {
        return Err(err(INTEGRITY_OFF));
    }
    let report = run_blocking(|| store.scrub_now()).map_err(|e| match e {
        engram_engine::Error::InvalidOption(_) => err(INTEGRITY_OFF),
        other => err(format!("ERR scrub failed: {other}")),
    })?;
    let summary = format!(
        "ENGRAM.SCRUB by client id={}: {} pages checked in {} ms, {} corrupt, {} repaired, \
         {} unrepairable, {} keys affected",
        ctx.session.info.id,
        report.pages_checked,
        report.duration.as_millis(),
        report.corrupt_pages,
        report.repaired_pages.len(),
        report.unrepairable_pages.len(),
        report.affected_keys.len(),
    );
    if report.unrepairable_pages.is_empty() && report.corrupt_pages == 0 {
        log::info!("{summary}");
    } else {
        log::warn!("{summary}");
    }

    let ks = ctx.ks();
    let out = &mut *ctx.out;
    out.map(9);
    for (name, value) in [
        ("pages_checked", report.pages_checked),
        ("pages_stale", report.pages_stale),
        ("corrupt_pages", report.corrupt_pages),
        ("repaired_pages", report.repaired_pages.len() as u64),
        ("unrepairable_pages", report.unrepairable_pages.len() as u64),
        ("parity_rewritten", report.parity_rewritten),
        ("metadata_rebuilt", report.metadata_rebuilt),
    ] {
        out.bulk(name.as_bytes());
        out.int(value as i64);
    }
    out.bulk(b"affected_keys");
    out.array(report.affected_keys.len());
    for affected in &report.affected_keys {
        match &affected.key {
            Some(ekey) => out.bulk(&ks.client_key_name(ekey)),
            None => out.bulk(format!("offset:{:#x}", affected.offset).as_bytes()),
        }
    }
    out.bulk(b"duration_ms");
    out.int(report.duration.as_millis() as i64);
    Ok(())
}
