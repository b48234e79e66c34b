//! Reading numpy .npy arrays (the oracle's reference logits and NLLs): float32 only.

/// Parses a little-endian float32 C-order .npy file (format versions 1-3): (shape, values).
pub fn parse_f32(bytes: &[u8]) -> Result<(Vec<usize>, Vec<f32>), String> {
    if bytes.get(..6) != Some(b"\x93NUMPY".as_slice()) {
        return Err("not a .npy file".into());
    }
    let major = *bytes.get(6).ok_or("truncated")?;
    let (header_len, header_start) = match major {
        1 => (
            u16::from_le_bytes(bytes.get(8..10).ok_or("truncated")?.try_into().unwrap()) as usize,
            10,
        ),
        2 | 3 => (
            u32::from_le_bytes(bytes.get(8..12).ok_or("truncated")?.try_into().unwrap()) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = std::str::from_utf8(
        bytes
            .get(header_start..header_start + header_len)
            .ok_or("truncated header")?,
    )
    .map_err(|_| "header is not UTF-8")?;
    if !header.contains("'descr': '<f4'") {
        return Err(format!("not little-endian float32: {header}"));
    }
    if header.contains("'fortran_order': True") {
        return Err("Fortran order is not supported".into());
    }
    let shape_text = header
        .split("'shape':")
        .nth(1)
        .and_then(|s| {
            s.split_once('(')
                .and_then(|(_, s)| s.split_once(')'))
                .map(|(s, _)| s)
        })
        .ok_or("no shape")?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| format!("bad shape {shape_text}")))
        .collect::<Result<_, _>>()?;
    let data = &bytes[header_start + header_len..]; // inside: the header slice was checked
    let n = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or("shape too large")?;
    if Some(data.len()) != n.checked_mul(4) {
        return Err(format!(
            "shape {shape:?} needs {} bytes, file has {}",
            n.saturating_mul(4),
            data.len()
        ));
    }
    Ok((
        shape,
        data.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::parse_f32;

    #[test]
    fn parse_f32_v1_shape_2_3_and_truncated_or_wrong_files_are_errors() {
        let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((header.len() as u16).to_le_bytes());
        bytes.extend(header.as_bytes());
        for v in 0..6 {
            bytes.extend((v as f32).to_le_bytes());
        }
        let (shape, values) = parse_f32(&bytes).unwrap();
        assert_eq!(shape, [2, 3]);
        assert_eq!(values, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        for cut in [0, 6, 7, 9, 20, bytes.len() - 1] {
            assert!(parse_f32(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
