//! GEO commands (Redis 7.0 semantics) over sorted sets: a position is a
//! member whose score is its 52-bit geohash (see `geohash`), exactly as
//! Redis stores it, so the data is interchangeable with Redis and every
//! sorted-set command works on it.
//!
//! Replies copy Redis's formats: distances with four decimals (rounded as
//! `llrint` does), coordinates as `%.17Lf` with trailing zeros removed.

mod geohash;

use engram_collections::types::{ScoreBound, SortedSet};

use self::geohash::{Extent, Shape};
use super::sorted_sets::{notify_stored, parse_score, store_result, zadd, zset_of, Stored};
use super::{
    err, int_arg, is, CmdError, CmdResult, CommandSpec, Ctx, Group, NOT_FLOAT, READONLY, SYNTAX,
    WHOLE_KEYSPACE, WRITE,
};
use crate::keyspace::{CKind, Object};
use crate::resp::{Args, OwnedArgs, ReplyWriter};

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("geo");
    let one = (1, 1, 1);
    vec![
        g.command(
            "geoadd",
            -5,
            WRITE,
            one,
            geoadd,
            "Adds one or more members to a geospatial index. The key is created if it \
             doesn't exist.",
        ),
        g.command(
            "geodist",
            -4,
            READONLY,
            one,
            geodist,
            "Returns the distance between two members of a geospatial index.",
        ),
        g.command(
            "geohash",
            -2,
            READONLY,
            one,
            geohash_cmd,
            "Returns members from a geospatial index as geohash strings.",
        ),
        g.command(
            "geopos",
            -2,
            READONLY,
            one,
            geopos,
            "Returns the longitude and latitude of members from a geospatial index.",
        ),
        // STORE / STOREDIST name a key anywhere among the options: inside
        // EXEC these two lock everything.
        g.command(
            "georadius",
            -6,
            WRITE | WHOLE_KEYSPACE,
            one,
            georadius,
            "Queries a geospatial index for members within a distance from a coordinate, \
             optionally stores the result.",
        ),
        g.command(
            "georadius_ro",
            -6,
            READONLY,
            one,
            georadius_ro,
            "Returns members from a geospatial index that are within a distance from a \
             coordinate.",
        ),
        g.command(
            "georadiusbymember",
            -5,
            WRITE | WHOLE_KEYSPACE,
            one,
            georadiusbymember,
            "Queries a geospatial index for members within a distance from a member, \
             optionally stores the result.",
        ),
        g.command(
            "georadiusbymember_ro",
            -5,
            READONLY,
            one,
            georadiusbymember_ro,
            "Returns members from a geospatial index that are within a distance from a \
             member.",
        ),
        g.command(
            "geosearch",
            -7,
            READONLY,
            one,
            geosearch,
            "Queries a geospatial index for members inside an area of a box or a circle.",
        ),
        g.command(
            "geosearchstore",
            -8,
            WRITE,
            (1, 2, 1),
            geosearchstore,
            "Queries a geospatial index for members inside an area of a box or a circle, \
             optionally stores the result.",
        ),
    ]
}

// ---------------------------------------------------------------------------
// Arguments and reply formats.

/// A float argument as Redis's `getDoubleFromObject` reads it.
fn float_arg(arg: &[u8], message: &str) -> Result<f64, CmdError> {
    parse_score(arg).ok_or_else(|| err(message))
}

/// A longitude, latitude pair within Redis's limits.
fn lon_lat(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), CmdError> {
    let lon = float_arg(lon, NOT_FLOAT)?;
    let lat = float_arg(lat, NOT_FLOAT)?;
    if !(geohash::LONG_MIN..=geohash::LONG_MAX).contains(&lon)
        || !(geohash::LAT_MIN..=geohash::LAT_MAX).contains(&lat)
    {
        return Err(err(format!(
            "ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"
        )));
    }
    Ok((lon, lat))
}

/// Meters per unit.
fn unit(arg: &[u8]) -> Result<f64, CmdError> {
    Ok(if is(arg, "m") {
        1.0
    } else if is(arg, "km") {
        1000.0
    } else if is(arg, "ft") {
        0.3048
    } else if is(arg, "mi") {
        1609.34
    } else {
        return Err(err(
            "ERR unsupported unit provided. please use M, KM, FT, MI",
        ));
    })
}

/// `radius unit`: the radius and meters per unit.
fn radius(radius: &[u8], unit_arg: &[u8]) -> Result<(f64, f64), CmdError> {
    let r = float_arg(radius, "ERR need numeric radius")?;
    if r < 0.0 {
        return Err(err("ERR radius cannot be negative"));
    }
    Ok((r, unit(unit_arg)?))
}

/// `width height unit`.
fn box_extent(width: &[u8], height: &[u8], unit_arg: &[u8]) -> Result<(f64, f64, f64), CmdError> {
    let w = float_arg(width, "ERR need numeric width")?;
    let h = float_arg(height, "ERR need numeric height")?;
    if h < 0.0 || w < 0.0 {
        return Err(err("ERR height or width cannot be negative"));
    }
    Ok((w, h, unit(unit_arg)?))
}

/// A distance as Redis's `fixedpoint_d2string(.., 4)` writes it.
fn format_distance(d: f64) -> String {
    let scaled = (d * 10000.0).round_ties_even();
    if scaled == 0.0 {
        return "0.0000".into();
    }
    let value = scaled as i64;
    let sign = if value < 0 { "-" } else { "" };
    let magnitude = value.unsigned_abs();
    format!("{sign}{}.{:04}", magnitude / 10000, magnitude % 10000)
}

fn reply_distance(out: &mut ReplyWriter, d: f64) {
    out.bulk(format_distance(d).as_bytes());
}

/// A coordinate as Redis's `addReplyHumanLongDouble` writes it: `%.17Lf`
/// (the double's exact value, 17 decimals), trailing zeros removed.
fn format_coordinate(value: f64) -> String {
    let mut text = format!("{value:.17}");
    if text.contains('.') {
        let trimmed = text.trim_end_matches('0').trim_end_matches('.').len();
        text.truncate(trimmed);
    }
    if text == "-0" {
        text = "0".into();
    }
    text
}

fn reply_coordinate(out: &mut ReplyWriter, value: f64) {
    out.double_text(&format_coordinate(value));
}

// ---------------------------------------------------------------------------
// GEOADD, GEODIST, GEOHASH, GEOPOS.

/// GEOADD key [NX|XX] [CH] lon lat member [...]: ZADD with the positions'
/// geohashes as scores (as Redis runs it).
fn geoadd(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (mut nx, mut xx) = (false, false);
    let mut at = 2;
    while at < args.len() {
        let arg = args.get(at);
        if is(arg, "nx") {
            nx = true;
        } else if is(arg, "xx") {
            xx = true;
        } else if !is(arg, "ch") {
            break;
        }
        at += 1;
    }
    if !(args.len() - at).is_multiple_of(3) || (nx && xx) {
        return Err(err(SYNTAX));
    }
    let mut scores = Vec::with_capacity((args.len() - at) / 3);
    for i in (at..args.len()).step_by(3) {
        let (lon, lat) = lon_lat(args.get(i), args.get(i + 1))?;
        let hash = geohash::encode(lon, lat, geohash::STEP_MAX)
            .ok_or_else(|| err("ERR invalid longitude,latitude pair"))?;
        scores.push(geohash::align52(hash).to_string());
    }
    let mut zadd_args: Vec<&[u8]> = Vec::with_capacity(at + scores.len() * 2);
    zadd_args.push(b"zadd");
    zadd_args.extend(args.iter().skip(1).take(at - 1));
    for (n, i) in (at..args.len()).step_by(3).enumerate() {
        zadd_args.push(scores[n].as_bytes());
        zadd_args.push(args.get(i + 2));
    }
    let owned = OwnedArgs::from_slices(&zadd_args);
    zadd(ctx, owned.args())
}

fn geodist(ctx: &mut Ctx, args: Args) -> CmdResult {
    let to_meters = match args.len() {
        4 => 1.0,
        5 => unit(args.get(4))?,
        _ => return Err(err(SYNTAX)),
    };
    let (a, b) = (args.get(2), args.get(3));
    ctx.reply_collection(args.get(1), CKind::SortedSet, |out, object| {
        let zset = zset_of(object);
        let positions = zset.and_then(|z| {
            let first = geohash::decode_score(z.score(a)?)?;
            let second = geohash::decode_score(z.score(b)?)?;
            Some((first, second))
        });
        match positions {
            Some(((lon1, lat1), (lon2, lat2))) => {
                reply_distance(out, geohash::distance(lon1, lat1, lon2, lat2) / to_meters)
            }
            None => out.null(),
        }
        Ok(())
    })
}

fn geohash_cmd(ctx: &mut Ctx, args: Args) -> CmdResult {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    ctx.reply_collection(args.get(1), CKind::SortedSet, |out, object| {
        let zset = zset_of(object);
        out.array(args.len() - 2);
        for member in args.iter().skip(2) {
            // Stored hashes use latitudes -85..85; the standard's are
            // -90..90: decode and encode again.
            let standard = zset
                .and_then(|z| z.score(member))
                .and_then(geohash::decode_score)
                .and_then(|(lon, lat)| geohash::encode_standard(lon, lat));
            match standard {
                Some(hash) => {
                    let mut text = [b'0'; 11];
                    for (i, c) in text.iter_mut().enumerate().take(10) {
                        let index = (hash.bits >> (52 - (i + 1) * 5)) & 0x1f;
                        *c = ALPHABET[index as usize];
                    }
                    out.bulk(&text);
                }
                None => out.null(),
            }
        }
        Ok(())
    })
}

fn geopos(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.reply_collection(args.get(1), CKind::SortedSet, |out, object| {
        let zset = zset_of(object);
        out.array(args.len() - 2);
        for member in args.iter().skip(2) {
            match zset
                .and_then(|z| z.score(member))
                .and_then(geohash::decode_score)
            {
                Some((lon, lat)) => {
                    out.array(2);
                    reply_coordinate(out, lon);
                    reply_coordinate(out, lat);
                }
                None => out.null_array(),
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------
// GEORADIUS, GEOSEARCH and friends.

/// Which command: where its centre comes from and what it may store.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// GEORADIUS[_RO] key lon lat radius unit
    Radius { store: bool },
    /// GEORADIUSBYMEMBER[_RO] key member radius unit
    ByMember { store: bool },
    /// GEOSEARCH key FROM... BY...
    Search,
    /// GEOSEARCHSTORE dst src FROM... BY... [STOREDIST]
    SearchStore,
}

impl Variant {
    fn is_search(self) -> bool {
        matches!(self, Variant::Search | Variant::SearchStore)
    }

    fn may_store(self) -> bool {
        matches!(
            self,
            Variant::Radius { store: true } | Variant::ByMember { store: true }
        )
    }

    /// The position of the source key and of the first option.
    fn layout(self) -> (usize, usize) {
        match self {
            Variant::Radius { .. } => (1, 6),
            Variant::ByMember { .. } => (1, 5),
            Variant::Search => (1, 2),
            Variant::SearchStore => (2, 3),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// A parsed search, its shape complete once the source was seen.
struct Query {
    shape: Option<Shape>,
    withdist: bool,
    withhash: bool,
    withcoord: bool,
    any: bool,
    sort: Sort,
    /// 0: no limit.
    count: u64,
    /// The position of the destination key.
    store: Option<usize>,
    storedist: bool,
}

/// A member found.
struct Point {
    longitude: f64,
    latitude: f64,
    /// Meters.
    distance: f64,
    score: f64,
    member: Box<[u8]>,
}

/// The position of `member` in `zset`.
fn member_position(zset: Option<&SortedSet>, member: &[u8]) -> Result<(f64, f64), CmdError> {
    zset.and_then(|z| z.score(member))
        .and_then(geohash::decode_score)
        .ok_or_else(|| err("ERR could not decode requested zset member"))
}

/// Parses a search as `georadiusGeneric` does, in its order: the centre
/// and radius of the GEORADIUS forms, then the options (FROMMEMBER looks
/// the member up as it comes), then the combinations.
fn parse_query(
    args: &Args,
    variant: Variant,
    zset: Option<&SortedSet>,
    exists: bool,
) -> Result<Query, CmdError> {
    let (_, base) = variant.layout();
    let mut centre: Option<(f64, f64)> = None;
    let mut extent: Option<(Extent, f64)> = None;
    match variant {
        Variant::Radius { .. } => {
            centre = Some(lon_lat(args.get(2), args.get(3))?);
            let (r, u) = radius(args.get(4), args.get(5))?;
            extent = Some((Extent::Radius(r), u));
        }
        Variant::ByMember { .. } if exists => {
            centre = Some(member_position(zset, args.get(2))?);
            let (r, u) = radius(args.get(3), args.get(4))?;
            extent = Some((Extent::Radius(r), u));
        }
        _ => {}
    }
    let mut query = Query {
        shape: None,
        withdist: false,
        withhash: false,
        withcoord: false,
        any: false,
        sort: Sort::None,
        count: 0,
        store: (variant == Variant::SearchStore).then_some(1),
        storedist: false,
    };
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let search = variant.is_search();
    let mut i = base;
    while i < args.len() {
        let arg = args.get(i);
        let more = args.len() - i - 1;
        if is(arg, "withdist") {
            query.withdist = true;
        } else if is(arg, "withhash") {
            query.withhash = true;
        } else if is(arg, "withcoord") {
            query.withcoord = true;
        } else if is(arg, "any") {
            query.any = true;
        } else if is(arg, "asc") {
            query.sort = Sort::Asc;
        } else if is(arg, "desc") {
            query.sort = Sort::Desc;
        } else if is(arg, "count") && more >= 1 {
            let count = int_arg(args.get(i + 1))?;
            if count <= 0 {
                return Err(err("ERR COUNT must be > 0"));
            }
            query.count = count as u64;
            i += 1;
        } else if (is(arg, "store") || is(arg, "storedist")) && more >= 1 && variant.may_store() {
            query.store = Some(i + 1);
            query.storedist = is(arg, "storedist");
            i += 1;
        } else if is(arg, "storedist") && variant == Variant::SearchStore {
            query.storedist = true;
        } else if is(arg, "frommember") && more >= 1 && search && !fromloc {
            if exists {
                centre = Some(member_position(zset, args.get(i + 1))?);
            }
            frommember = true;
            i += 1;
        } else if is(arg, "fromlonlat") && more >= 2 && search && !frommember {
            centre = Some(lon_lat(args.get(i + 1), args.get(i + 2))?);
            fromloc = true;
            i += 2;
        } else if is(arg, "byradius") && more >= 2 && search && !bybox {
            let (r, u) = radius(args.get(i + 1), args.get(i + 2))?;
            extent = Some((Extent::Radius(r), u));
            byradius = true;
            i += 2;
        } else if is(arg, "bybox") && more >= 3 && search && !byradius {
            let (width, height, u) = box_extent(args.get(i + 1), args.get(i + 2), args.get(i + 3))?;
            extent = Some((Extent::Box { width, height }, u));
            bybox = true;
            i += 3;
        } else {
            return Err(err(SYNTAX));
        }
        i += 1;
    }
    if query.store.is_some() && (query.withdist || query.withhash || query.withcoord) {
        return Err(err(format!(
            "ERR {} is not compatible with WITHDIST, WITHHASH and WITHCOORD options",
            if variant == Variant::SearchStore {
                "GEOSEARCHSTORE"
            } else {
                "STORE option in GEORADIUS"
            }
        )));
    }
    let name = String::from_utf8_lossy(args.get(0));
    if search && !(frommember || fromloc) {
        return Err(err(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        )));
    }
    if search && !(byradius || bybox) {
        return Err(err(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        )));
    }
    if query.any && query.count == 0 {
        return Err(err("ERR the ANY argument requires COUNT argument"));
    }
    if let (Some((longitude, latitude)), Some((extent, unit))) = (centre, extent) {
        query.shape = Some(Shape {
            longitude,
            latitude,
            extent,
            unit,
        });
    }
    Ok(query)
}

/// The members inside the shape, sorted and cut to COUNT as asked.
fn find(zset: &SortedSet, query: &Query) -> Vec<Point> {
    let Some(shape) = query.shape else {
        return Vec::new();
    };
    let limit = if query.any {
        usize::try_from(query.count).unwrap_or(usize::MAX)
    } else {
        0
    };
    let mut points: Vec<Point> = Vec::new();
    let boxes = shape.boxes();
    let mut last: Option<geohash::Hash> = None;
    for hash in boxes {
        if geohash::is_zero(hash) {
            continue;
        }
        // Huge radii make neighbours coincide: skip a repeat of the box
        // searched just before.
        if last == Some(hash) {
            continue;
        }
        if limit > 0 && points.len() >= limit {
            break;
        }
        let (min, max) = geohash::score_range(hash);
        let ranks = zset.score_range_ranks(
            ScoreBound::Inclusive(min as f64),
            ScoreBound::Exclusive(max as f64),
        );
        for (member, score) in zset.range(ranks) {
            if let Some((longitude, latitude, distance)) = shape.contains(score) {
                points.push(Point {
                    longitude,
                    latitude,
                    distance,
                    score,
                    member: member.into(),
                });
            }
            if limit > 0 && points.len() >= limit {
                break;
            }
        }
        last = Some(hash);
    }
    // COUNT without an order means the nearest ones (not with ANY).
    let sort = if query.count != 0 && query.sort == Sort::None && !query.any {
        Sort::Asc
    } else {
        query.sort
    };
    match sort {
        Sort::None => {}
        Sort::Asc => points.sort_by(|a, b| a.distance.total_cmp(&b.distance)),
        Sort::Desc => points.sort_by(|a, b| b.distance.total_cmp(&a.distance)),
    }
    if query.count != 0 {
        points.truncate(usize::try_from(query.count).unwrap_or(usize::MAX));
    }
    points
}

fn reply_points(out: &mut ReplyWriter, points: &[Point], query: &Query) {
    let unit = query.shape.map_or(1.0, |s| s.unit);
    let options =
        usize::from(query.withdist) + usize::from(query.withhash) + usize::from(query.withcoord);
    out.array(points.len());
    for point in points {
        if options > 0 {
            out.array(options + 1);
        }
        out.bulk(&point.member);
        if query.withdist {
            reply_distance(out, point.distance / unit);
        }
        if query.withhash {
            out.int(point.score as i64);
        }
        if query.withcoord {
            out.array(2);
            reply_coordinate(out, point.longitude);
            reply_coordinate(out, point.latitude);
        }
    }
}

fn georadius(ctx: &mut Ctx, args: Args) -> CmdResult {
    georadius_generic(ctx, args, Variant::Radius { store: true })
}

fn georadius_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    georadius_generic(ctx, args, Variant::Radius { store: false })
}

fn georadiusbymember(ctx: &mut Ctx, args: Args) -> CmdResult {
    georadius_generic(ctx, args, Variant::ByMember { store: true })
}

fn georadiusbymember_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    georadius_generic(ctx, args, Variant::ByMember { store: false })
}

fn geosearch(ctx: &mut Ctx, args: Args) -> CmdResult {
    georadius_generic(ctx, args, Variant::Search)
}

fn geosearchstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    georadius_generic(ctx, args, Variant::SearchStore)
}

/// What a search found: the reply to send, or the count stored.
enum Found<'a> {
    Reply(Vec<Point>, Query),
    /// The destination, and what storing did to it.
    Stored(&'a [u8], Stored),
}

fn georadius_generic(ctx: &mut Ctx, args: Args, variant: Variant) -> CmdResult {
    let (src_at, base) = variant.layout();
    let src = args.get(src_at);
    // The keys a store may name: GEOSEARCHSTORE's destination, or any
    // argument after a STORE / STOREDIST option (a superset, only locked).
    let mut keys: Vec<&[u8]> = vec![src];
    if variant == Variant::SearchStore {
        keys.push(args.get(1));
    }
    if variant.may_store() {
        for i in base..args.len().saturating_sub(1) {
            let arg = args.get(i);
            if is(arg, "store") || is(arg, "storedist") {
                keys.push(args.get(i + 1));
            }
        }
    }
    if keys.len() == 1 {
        // A pure read: lock-free.
        return ctx.reply_collection(src, CKind::SortedSet, |out, object| {
            let zset = zset_of(object);
            let query = parse_query(&args, variant, zset, object.is_some())?;
            let points = zset.map(|z| find(z, &query)).unwrap_or_default();
            reply_points(out, &points, &query);
            Ok(())
        });
    }
    let found = ctx.write(&keys, false, |txn, db, now| {
        let object = txn.collection(db, src, CKind::SortedSet, now)?;
        let exists = object.is_some();
        let zset = match object {
            Some(Object::SortedSet(zset)) => Some(zset),
            _ => None,
        };
        let query = parse_query(&args, variant, zset, exists)?;
        let points = zset.map(|z| find(z, &query)).unwrap_or_default();
        let Some(dst) = query.store else {
            return Ok(Found::Reply(points, query));
        };
        let dst = args.get(dst);
        let unit = query.shape.map_or(1.0, |s| s.unit);
        let mut result = SortedSet::new();
        for point in &points {
            let score = if query.storedist {
                point.distance / unit
            } else {
                point.score
            };
            if let Some(score) = engram_collections::types::Score::new(score) {
                result.insert(&point.member, score);
            }
        }
        Ok(Found::Stored(dst, store_result(txn, db, now, dst, result)?))
    })?;
    match found {
        Found::Reply(points, query) => reply_points(ctx.out, &points, &query),
        Found::Stored(dst, stored) => {
            let event = if variant == Variant::SearchStore {
                "geosearchstore"
            } else {
                "georadiusstore"
            };
            notify_stored(ctx, event, dst, stored);
            ctx.out.int(stored.len as i64);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_and_coordinates_as_redis_prints_them() {
        assert_eq!(format_distance(166274.15156960033), "166274.1516");
        assert_eq!(format_distance(0.0), "0.0000");
        assert_eq!(format_distance(0.00004), "0.0000");
        assert_eq!(format_distance(1.5), "1.5000");
        assert_eq!(
            format_coordinate(13.361389338970184),
            "13.36138933897018433"
        );
        assert_eq!(format_coordinate(-0.0), "0");
        assert_eq!(format_coordinate(2.0), "2");
    }
}
