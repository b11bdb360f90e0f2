//! The images the simulator's predictions draw: a PNG of stripes in two
//! colours that a hash of the prompt picks, the same for the same prompt,
//! written without compression (a small image needs none).

/// A `side` × `side` PNG (RGB, 8 bits) drawn from `seed`.
pub(super) fn draw(seed: &[u8], side: u32) -> Vec<u8> {
    let hash = seed.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    let [a, b, c, d, e, f, ..] = hash.to_le_bytes();
    let (background, stripe) = ([a, b, c], [d, e, f]);
    let mut rows = Vec::with_capacity((side as usize * 3 + 1) * side as usize);
    for y in 0..side {
        // Each row starts with its filter type: none.
        rows.push(0);
        for x in 0..side {
            let colour = if (x + y) / 8 % 2 == 0 { background } else { stripe };
            rows.extend_from_slice(&colour);
        }
    }
    let mut header = Vec::with_capacity(13);
    header.extend_from_slice(&side.to_be_bytes());
    header.extend_from_slice(&side.to_be_bytes());
    header.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut png, b"IHDR", &header);
    chunk(&mut png, b"IDAT", &zlib_stored(&rows));
    chunk(&mut png, b"IEND", &[]);
    png
}

/// Appends a PNG chunk: its length, kind, data and CRC.
fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&u32::try_from(data.len()).expect("a small image").to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}

/// `data` as a zlib stream of stored (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = if data.is_empty() { vec![&[]] } else { data.chunks(65_535).collect() };
    for (i, block) in blocks.iter().enumerate() {
        out.push(u8::from(i + 1 == blocks.len()));
        let len = u16::try_from(block.len()).expect("a stored block holds at most 65,535 bytes");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for byte in data {
        a = (a + u32::from(*byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

/// The CRC-32 PNG chunks end with (ISO 3309).
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in data {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drawing_is_a_png_the_same_for_the_same_prompt() {
        let image = draw(b"a red fox", 16);
        assert!(image.starts_with(b"\x89PNG\r\n\x1a\n"));
        assert_eq!(&image[12..16], b"IHDR");
        assert_eq!(image, draw(b"a red fox", 16));
        assert_ne!(image, draw(b"a blue whale", 16));
        // The CRC of the IEND chunk of every PNG.
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
        // zlib's Adler-32 of "Wikipedia", at the stream's end.
        assert!(zlib_stored(b"Wikipedia").ends_with(&0x11e6_0398_u32.to_be_bytes()));
    }
}
