//! The demo's files: what each volume holds when the backup is taken, how the demo
//! damages them, and how a file on disk compares with its backed-up version.
//!
//! Contents are generated from fixed seeds, so every run writes the same bytes and
//! the checksums shown are the same from run to run.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

/// One file of a volume: path inside the volume, and its contents.
pub type File = (String, Vec<u8>);

/// The web shop's document root (PVC `web-content`).
pub fn web_content() -> Vec<File> {
    let mut html = String::from(
        "<!doctype html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>Shop</title>\n\
         <script src=\"/assets/app.js\" defer></script></head>\n<body>\n<h1>Shop</h1>\n\
         <img src=\"/assets/hero.jpg\" alt=\"\">\n<ul id=\"products\">\n",
    );
    for i in 1..=60 {
        let _ = writeln!(
            html,
            "  <li><a href=\"/p/{i}\">Product {i}</a> <span class=\"price\">{}.{:02}</span></li>",
            5 + i * 3,
            (i * 37) % 100
        );
    }
    html.push_str("</ul>\n</body>\n</html>\n");

    let mut js = String::from("// shop front end, bundled\n\"use strict\";\n");
    let mut i = 0;
    while js.len() < 420 * 1024 {
        let _ = writeln!(
            js,
            "export function product{i}(cart) {{ return cart.add({{ id: {i}, sku: \"SKU-{:06}\", qty: 1 }}); }}",
            i * 7919 % 1_000_000
        );
        i += 1;
    }

    let mut catalog = String::from("[\n");
    for i in 1..=900 {
        let _ = writeln!(
            catalog,
            "  {{\"id\": {i}, \"name\": \"Product {i}\", \"price\": {}.{:02}, \"stock\": {}}},",
            5 + i * 3,
            (i * 37) % 100,
            (i * 13) % 250
        );
    }
    catalog.push_str("  {\"id\": 0, \"name\": \"gift card\", \"price\": 0, \"stock\": 0}\n]\n");

    let mut jpeg = vec![0xff, 0xd8, 0xff, 0xe0];
    jpeg.extend(noise(7, 640 * 1024 - 6));
    jpeg.extend([0xff, 0xd9]);

    vec![
        ("index.html".into(), html.into_bytes()),
        ("catalog.json".into(), catalog.into_bytes()),
        ("assets/app.js".into(), js.into_bytes()),
        ("assets/hero.jpg".into(), jpeg),
    ]
}

/// The data directory of database replica `replica` (PVC `data-db-<replica>`).
pub fn db_data(replica: u64) -> Vec<File> {
    let seed = 100 + replica * 10;
    vec![
        ("PG_VERSION".into(), b"16\n".to_vec()),
        ("base/orders.dat".into(), pages(seed, 96)),
        ("base/customers.dat".into(), pages(seed + 1, 32)),
        (
            "pg_wal/000000010000000000000001".into(),
            pages(seed + 2, 64),
        ),
    ]
}

/// `count` database pages of 8 KiB: a small header naming the page, then noise.
fn pages(seed: u64, count: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * 8192);
    let body = noise(seed, count * 8192);
    for (i, page) in body.chunks(8192).enumerate() {
        let header = format!("PAGE {i:08} LSN 0/{:08X}\n", seed * 0x1000 + i as u64);
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&page[header.len()..]);
    }
    out
}

/// Reproducible pseudo-random bytes (xorshift64*).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Writes `files` under `dir`, creating directories as needed.
pub fn write_all(dir: &Path, files: &[File]) -> Result<()> {
    for (name, data) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, data).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// What the demo does to a file.
#[derive(Clone, Copy, Debug)]
pub enum Damage {
    /// Replaced by these bytes, as a bad deploy would.
    Overwrite(&'static [u8]),
    /// `len` bytes at `offset` set to zero, as a torn write leaves them.
    Zero {
        offset: usize,
        len: usize,
    },
    /// Cut to this many bytes.
    Truncate(usize),
    Delete,
}

/// The damage done in step "break the data": (PVC, file, damage).
pub const DAMAGE: &[(&str, &str, Damage)] = &[
    (
        "web-content",
        "index.html",
        Damage::Overwrite(b"<h1>502 Bad Gateway</h1>\n"),
    ),
    ("web-content", "assets/hero.jpg", Damage::Delete),
    (
        "data-db-0",
        "base/orders.dat",
        Damage::Zero {
            offset: 128 * 1024,
            len: 64 * 1024,
        },
    ),
    ("data-db-1", "base/customers.dat", Damage::Delete),
    ("data-db-2", "base/orders.dat", Damage::Truncate(4096)),
];

impl Damage {
    pub fn apply(self, path: &Path) -> Result<()> {
        let context = || format!("damaging {}", path.display());
        match self {
            Damage::Overwrite(data) => std::fs::write(path, data).with_context(context),
            Damage::Zero { offset, len } => {
                let mut data = std::fs::read(path).with_context(context)?;
                let end = (offset + len).min(data.len());
                data[offset.min(end)..end].fill(0);
                std::fs::write(path, data).with_context(context)
            }
            Damage::Truncate(len) => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .with_context(context)?;
                file.set_len(len as u64).with_context(context)
            }
            Damage::Delete => std::fs::remove_file(path).with_context(context),
        }
    }

    /// A few words for the listing.
    pub fn describe(self) -> String {
        match self {
            Damage::Overwrite(_) => "overwritten".into(),
            Damage::Zero { len, .. } => format!("{} zeroed", size(len as u64)),
            Damage::Truncate(len) => format!("cut to {}", size(len as u64)),
            Damage::Delete => "deleted".into(),
        }
    }
}

/// How a file on disk compares with the backed-up version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileState {
    Intact,
    /// Present with other contents: their SHA-256.
    Differs(String),
    Missing,
}

pub fn compare(dir: &Path, name: &str, original: &[u8]) -> Result<FileState> {
    let path = dir.join(name);
    match std::fs::read(&path) {
        Ok(data) if data == original => Ok(FileState::Intact),
        Ok(data) => Ok(FileState::Differs(sha256_hex(&data))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(FileState::Missing),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// `1.5 MiB`, `64 KiB`, `25 B`.
pub fn size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    if bytes >= KIB * KIB {
        format!("{:.1} MiB", bytes as f64 / (KIB * KIB) as f64)
    } else if bytes >= KIB {
        let kib = bytes as f64 / KIB as f64;
        if bytes.is_multiple_of(KIB) {
            format!("{kib:.0} KiB")
        } else {
            format!("{kib:.1} KiB")
        }
    } else {
        format!("{bytes} B")
    }
}

/// SHA-256 (FIPS 180-4) of `data`, in lowercase hex. Small enough to keep here rather
/// than add a dependency for one checksum.
pub fn sha256_hex(data: &[u8]) -> String {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut message = data.to_vec();
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in message.chunks(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    h.iter().fold(String::with_capacity(64), |mut out, word| {
        let _ = write!(out, "{word:08x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_known_digests() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(
            sha256_hex(long),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }

    #[test]
    fn contents_are_the_same_every_run_and_differ_between_replicas() {
        assert_eq!(db_data(1), db_data(1));
        assert_ne!(db_data(0)[1].1, db_data(1)[1].1);
        assert_eq!(web_content()[3].1.len(), 640 * 1024);
    }

    #[test]
    fn every_damage_changes_what_it_touches() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("refill-demo-data-{}", std::process::id()));
        let mut files = web_content();
        files.extend(db_data(0));
        write_all(&dir, &files)?;
        for (name, damage) in [
            ("index.html", DAMAGE[0].2),
            ("assets/hero.jpg", Damage::Delete),
            ("base/orders.dat", DAMAGE[2].2),
            ("base/customers.dat", Damage::Truncate(4096)),
        ] {
            let original = &files.iter().find(|(n, _)| n == name).unwrap().1;
            assert_eq!(compare(&dir, name, original)?, FileState::Intact);
            damage.apply(&dir.join(name))?;
            assert_ne!(compare(&dir, name, original)?, FileState::Intact, "{name}");
        }
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
