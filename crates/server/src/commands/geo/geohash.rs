//! The geohash arithmetic of Redis's GEO commands, bit for bit: positions
//! are 26-step (52-bit) interleaved geohashes over longitude [-180, 180]
//! and latitude [-85.05112878, 85.05112878] (the Web Mercator limits),
//! stored as sorted-set scores, so a set written here reads the same in
//! Redis and back. Searches cover a shape with the geohash box of its
//! centre and that box's eight neighbours at a step estimated from the
//! radius, then filter members by their real (haversine) distance.

use std::f64::consts::PI;

/// Steps of a stored position: 26 per axis, 52 bits.
pub const STEP_MAX: u8 = 26;
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
pub const LONG_MIN: f64 = -180.0;
pub const LONG_MAX: f64 = 180.0;

/// Redis's WGS-84 quadratic mean radius.
const EARTH_RADIUS_IN_METERS: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hash {
    pub bits: u64,
    pub step: u8,
}

impl Hash {
    /// A neighbour dropped from a search (Redis's GZERO).
    const ZERO: Hash = Hash { bits: 0, step: 0 };

    fn is_zero(self) -> bool {
        self.bits == 0 && self.step == 0
    }
}

#[derive(Clone, Copy, Debug)]
struct Range {
    min: f64,
    max: f64,
}

const WGS84_LONG: Range = Range {
    min: LONG_MIN,
    max: LONG_MAX,
};
const WGS84_LAT: Range = Range {
    min: LAT_MIN,
    max: LAT_MAX,
};

/// The cell a hash names.
#[derive(Clone, Copy, Debug)]
struct Area {
    longitude: Range,
    latitude: Range,
}

fn deg_rad(degrees: f64) -> f64 {
    degrees * (PI / 180.0)
}

fn rad_deg(radians: f64) -> f64 {
    radians / (PI / 180.0)
}

/// Spreads the bits of `x` to the even positions and those of `y` to the
/// odd ones.
fn interleave(x: u32, y: u32) -> u64 {
    fn spread(v: u32) -> u64 {
        let mut v = u64::from(v);
        v = (v | (v << 16)) & 0x0000_FFFF_0000_FFFF;
        v = (v | (v << 8)) & 0x00FF_00FF_00FF_00FF;
        v = (v | (v << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
        v = (v | (v << 2)) & 0x3333_3333_3333_3333;
        (v | (v << 1)) & 0x5555_5555_5555_5555
    }
    spread(x) | (spread(y) << 1)
}

/// The inverse of `interleave`: (even bits, odd bits).
fn deinterleave(bits: u64) -> (u32, u32) {
    fn squash(mut v: u64) -> u32 {
        v &= 0x5555_5555_5555_5555;
        v = (v | (v >> 1)) & 0x3333_3333_3333_3333;
        v = (v | (v >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
        v = (v | (v >> 4)) & 0x00FF_00FF_00FF_00FF;
        v = (v | (v >> 8)) & 0x0000_FFFF_0000_FFFF;
        v = (v | (v >> 16)) & 0x0000_0000_FFFF_FFFF;
        v as u32
    }
    (squash(bits), squash(bits >> 1))
}

/// The hash of a position in the given ranges (latitude in the even
/// bits); None outside the ranges or Redis's limits.
fn encode_in(
    long_range: Range,
    lat_range: Range,
    longitude: f64,
    latitude: f64,
    step: u8,
) -> Option<Hash> {
    if step == 0 || step > 32 {
        return None;
    }
    if !(LONG_MIN..=LONG_MAX).contains(&longitude) || !(LAT_MIN..=LAT_MAX).contains(&latitude) {
        return None;
    }
    if latitude < lat_range.min
        || latitude > lat_range.max
        || longitude < long_range.min
        || longitude > long_range.max
    {
        return None;
    }
    let cells = (1u64 << step) as f64;
    let lat_offset = (latitude - lat_range.min) / (lat_range.max - lat_range.min) * cells;
    let long_offset = (longitude - long_range.min) / (long_range.max - long_range.min) * cells;
    // C's double -> uint32_t conversion: truncation.
    Some(Hash {
        bits: interleave(lat_offset as u32, long_offset as u32),
        step,
    })
}

/// The WGS-84 (Redis range) hash of a position.
pub fn encode(longitude: f64, latitude: f64, step: u8) -> Option<Hash> {
    encode_in(WGS84_LONG, WGS84_LAT, longitude, latitude, step)
}

/// The standard geohash (latitude -90..90) of a position, as GEOHASH
/// spells it.
pub fn encode_standard(longitude: f64, latitude: f64) -> Option<Hash> {
    encode_in(
        WGS84_LONG,
        Range {
            min: -90.0,
            max: 90.0,
        },
        longitude,
        latitude,
        STEP_MAX,
    )
}

fn decode_in(long_range: Range, lat_range: Range, hash: Hash) -> Option<Area> {
    if hash.is_zero() {
        return None;
    }
    let (ilat, ilong) = deinterleave(hash.bits);
    let cells = (1u64 << hash.step) as f64;
    let lat_scale = lat_range.max - lat_range.min;
    let long_scale = long_range.max - long_range.min;
    Some(Area {
        latitude: Range {
            min: lat_range.min + (f64::from(ilat) / cells) * lat_scale,
            max: lat_range.min + ((f64::from(ilat) + 1.0) / cells) * lat_scale,
        },
        longitude: Range {
            min: long_range.min + (f64::from(ilong) / cells) * long_scale,
            max: long_range.min + ((f64::from(ilong) + 1.0) / cells) * long_scale,
        },
    })
}

fn decode(hash: Hash) -> Option<Area> {
    decode_in(WGS84_LONG, WGS84_LAT, hash)
}

/// The position a stored score stands for: its cell's centre, clamped to
/// the limits.
pub fn decode_score(score: f64) -> Option<(f64, f64)> {
    let area = decode(Hash {
        bits: score as u64,
        step: STEP_MAX,
    })?;
    let longitude = ((area.longitude.min + area.longitude.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let latitude = ((area.latitude.min + area.latitude.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    Some((longitude, latitude))
}

/// A hash as a 52-bit score.
pub fn align52(hash: Hash) -> u64 {
    hash.bits << (52 - u32::from(hash.step) * 2)
}

/// `hash` moved one cell east (`d` > 0) or west along the longitude bits
/// (the odd ones), wrapping.
fn move_x(hash: &mut Hash, d: i8) {
    if d == 0 {
        return;
    }
    let shift = 64 - u32::from(hash.step) * 2;
    let mut x = hash.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let y = hash.bits & 0x5555_5555_5555_5555;
    let zz = 0x5555_5555_5555_5555u64 >> shift;
    if d > 0 {
        x = x.wrapping_add(zz + 1);
    } else {
        x |= zz;
        x = x.wrapping_sub(zz + 1);
    }
    x &= 0xaaaa_aaaa_aaaa_aaaau64 >> shift;
    hash.bits = x | y;
}

/// `hash` moved one cell north (`d` > 0) or south along the latitude bits.
fn move_y(hash: &mut Hash, d: i8) {
    if d == 0 {
        return;
    }
    let shift = 64 - u32::from(hash.step) * 2;
    let x = hash.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let mut y = hash.bits & 0x5555_5555_5555_5555;
    let zz = 0xaaaa_aaaa_aaaa_aaaau64 >> shift;
    if d > 0 {
        y = y.wrapping_add(zz + 1);
    } else {
        y |= zz;
        y = y.wrapping_sub(zz + 1);
    }
    y &= 0x5555_5555_5555_5555u64 >> shift;
    hash.bits = x | y;
}

fn moved(hash: Hash, dx: i8, dy: i8) -> Hash {
    let mut hash = hash;
    move_x(&mut hash, dx);
    move_y(&mut hash, dy);
    hash
}

/// The distance along a meridian, in meters.
fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_IN_METERS * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// The haversine distance between two positions, in meters.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let lon1r = deg_rad(lon1);
    let lon2r = deg_rad(lon2);
    let v = ((lon2r - lon1r) / 2.0).sin();
    // Same longitude: the cheaper formula (and Redis's exact result).
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let lat1r = deg_rad(lat1);
    let lat2r = deg_rad(lat2);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_IN_METERS * a.sqrt().asin()
}

/// The step whose cells are about as wide as the search radius.
fn estimate_steps(range_meters: f64, lat: f64) -> u8 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut range = range_meters;
    let mut step: i32 = 1;
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    // Cells narrow towards the poles.
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// What a search covers, around its centre.
#[derive(Clone, Copy, Debug)]
pub enum Extent {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// A search shape: its centre, extent (in `unit`s) and meters per unit.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub longitude: f64,
    pub latitude: f64,
    pub extent: Extent,
    pub unit: f64,
}

impl Shape {
    /// [min longitude, min latitude, max longitude, max latitude].
    fn bounding_box(&self) -> [f64; 4] {
        let (half_height, half_width) = match self.extent {
            Extent::Radius(r) => (r, r),
            Extent::Box { width, height } => (height / 2.0, width / 2.0),
        };
        let height = self.unit * half_height;
        let width = self.unit * half_width;
        let lat = self.latitude;
        let lat_delta = rad_deg(height / EARTH_RADIUS_IN_METERS);
        let long_delta_top =
            rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(lat + lat_delta).cos());
        let long_delta_bottom =
            rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(lat - lat_delta).cos());
        // The hemispheres widen in opposite directions.
        let long_delta = if lat < 0.0 {
            long_delta_bottom
        } else {
            long_delta_top
        };
        [
            self.longitude - long_delta,
            lat - lat_delta,
            self.longitude + long_delta,
            lat + lat_delta,
        ]
    }

    /// The boxes to search, in Redis's order (centre, N, S, E, W, NE, NW,
    /// SE, SW); dropped ones are `Hash::ZERO`.
    pub fn boxes(&self) -> [Hash; 9] {
        let [min_lon, min_lat, max_lon, max_lat] = self.bounding_box();
        let radius_meters = self.unit
            * match self.extent {
                Extent::Radius(r) => r,
                Extent::Box { width, height } => {
                    ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
                }
            };
        let mut steps = estimate_steps(radius_meters, self.latitude);
        let centre = |steps| encode(self.longitude, self.latitude, steps).unwrap_or(Hash::ZERO);
        let mut hash = centre(steps);
        // Near a cell's edge the estimated step may leave part of the
        // shape outside the nine cells: one step coarser then.
        let beyond = |hash: Hash| {
            let area = |h| decode(h).map(|a: Area| (a.longitude, a.latitude));
            let edge = |dx, dy| area(moved(hash, dx, dy));
            let north = edge(0, 1).is_some_and(|(_, lat)| lat.max < max_lat);
            let south = edge(0, -1).is_some_and(|(_, lat)| lat.min > min_lat);
            let east = edge(1, 0).is_some_and(|(lon, _)| lon.max < max_lon);
            let west = edge(-1, 0).is_some_and(|(lon, _)| lon.min > min_lon);
            north || south || east || west
        };
        if steps > 1 && beyond(hash) {
            steps -= 1;
            hash = centre(steps);
        }
        let mut boxes = [
            hash,
            moved(hash, 0, 1),
            moved(hash, 0, -1),
            moved(hash, 1, 0),
            moved(hash, -1, 0),
            moved(hash, 1, 1),
            moved(hash, -1, 1),
            moved(hash, 1, -1),
            moved(hash, -1, -1),
        ];
        // Drop the neighbours on sides the shape does not reach.
        if steps >= 2 {
            if let Some(area) = decode(hash) {
                let (n, s, e, w, ne, nw, se, sw) = (1, 2, 3, 4, 5, 6, 7, 8);
                if area.latitude.min < min_lat {
                    for i in [s, sw, se] {
                        boxes[i] = Hash::ZERO;
                    }
                }
                if area.latitude.max > max_lat {
                    for i in [n, ne, nw] {
                        boxes[i] = Hash::ZERO;
                    }
                }
                if area.longitude.min < min_lon {
                    for i in [w, sw, nw] {
                        boxes[i] = Hash::ZERO;
                    }
                }
                if area.longitude.max > max_lon {
                    for i in [e, se, ne] {
                        boxes[i] = Hash::ZERO;
                    }
                }
            }
        }
        boxes
    }

    /// The position and distance (meters) of a stored score, if inside.
    pub fn contains(&self, score: f64) -> Option<(f64, f64, f64)> {
        let (lon, lat) = decode_score(score)?;
        let distance = match self.extent {
            Extent::Radius(r) => {
                let d = distance(self.longitude, self.latitude, lon, lat);
                if d > r * self.unit {
                    return None;
                }
                d
            }
            Extent::Box { width, height } => {
                let (width, height) = (width * self.unit, height * self.unit);
                // Latitude first: the cheaper test. (Redis measures the
                // longitude offset along the member's own latitude.)
                if lat_distance(lat, self.latitude) > height / 2.0 {
                    return None;
                }
                if distance(lon, lat, self.longitude, lat) > width / 2.0 {
                    return None;
                }
                distance(self.longitude, self.latitude, lon, lat)
            }
        };
        Some((lon, lat, distance))
    }
}

/// The scores [min, max) of the members inside a box.
pub fn score_range(hash: Hash) -> (u64, u64) {
    let min = align52(hash);
    let max = align52(Hash {
        bits: hash.bits + 1,
        step: hash.step,
    });
    (min, max)
}

pub fn is_zero(hash: Hash) -> bool {
    hash.is_zero()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaving_round_trips() {
        for (x, y) in [
            (0, 0),
            (1, 0),
            (0, 1),
            (0x3ff_ffff, 0x155_5555),
            (u32::MAX, 7),
        ] {
            assert_eq!(deinterleave(interleave(x, y)), (x, y));
        }
        assert_eq!(interleave(1, 0), 1);
        assert_eq!(interleave(0, 1), 2);
    }

    #[test]
    fn palermo_scores_as_in_redis() {
        // GEOADD Sicily 13.361389 38.115556 "Palermo"; ZSCORE: 3479099956230698
        let hash = encode(13.361389, 38.115556, STEP_MAX).unwrap();
        assert_eq!(align52(hash), 3479099956230698);
        let hash = encode(15.087269, 37.502669, STEP_MAX).unwrap();
        assert_eq!(align52(hash), 3479447370796909);
    }

    #[test]
    fn distance_as_in_redis() {
        // GEODIST Sicily Palermo Catania: "166274.1516"
        let (lon1, lat1) = decode_score(3479099956230698.0).unwrap();
        let (lon2, lat2) = decode_score(3479447370796909.0).unwrap();
        let d = distance(lon1, lat1, lon2, lat2);
        assert_eq!((d * 10000.0).round_ties_even() as i64, 1662741516);
    }

    #[test]
    fn out_of_range_positions_do_not_encode() {
        assert!(encode(180.1, 0.0, STEP_MAX).is_none());
        assert!(encode(0.0, 85.06, STEP_MAX).is_none());
        assert!(encode(-180.0, -85.05112878, STEP_MAX).is_some());
    }
}
