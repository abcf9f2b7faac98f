//! Intset (small sets of integers): `encoding u32le` (2, 4 or 8: the
//! width of every element) `| length u32le | elements`, little-endian,
//! strictly ascending.

use super::int_le;

pub fn members(blob: &[u8]) -> Result<Vec<i64>, String> {
    if blob.len() < 8 {
        return Err("intset shorter than its header".into());
    }
    let width = u32::from_le_bytes(blob[0..4].try_into().expect("4 bytes")) as usize;
    let len = u32::from_le_bytes(blob[4..8].try_into().expect("4 bytes")) as usize;
    if !matches!(width, 2 | 4 | 8) {
        return Err(format!("intset of unknown width {width}"));
    }
    let body = &blob[8..];
    if len.checked_mul(width) != Some(body.len()) {
        return Err(format!(
            "intset says {len} elements of {width} bytes, holds {} bytes",
            body.len()
        ));
    }
    let members: Vec<i64> = body.chunks_exact(width).map(int_le).collect();
    if members.windows(2).any(|pair| pair[0] >= pair[1]) {
        return Err("intset elements out of order or repeated".into());
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    #[test]
    fn widths_and_order() {
        let mut blob = vec![2, 0, 0, 0, 2, 0, 0, 0];
        blob.extend_from_slice(&(-5i16).to_le_bytes());
        blob.extend_from_slice(&7i16.to_le_bytes());
        assert_eq!(super::members(&blob).unwrap(), vec![-5, 7]);
        blob[4] = 3;
        assert!(super::members(&blob).is_err());
        blob[4] = 2;
        blob.swap(8, 10);
        blob.swap(9, 11);
        assert!(super::members(&blob).is_err(), "descending");
        assert!(super::members(&[3, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }
}
