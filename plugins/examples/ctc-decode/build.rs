//! Extracts the OCR charset from the recognition model's metadata (key
//! `character`, one symbol per line) at build time, so the plugin needs no
//! configuration. The model path comes from `INFERGATE_OCR_REC_MODEL`.

use std::{env, fs, path::PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=INFERGATE_OCR_REC_MODEL");
    let model = env::var("INFERGATE_OCR_REC_MODEL").unwrap_or_else(|_| {
        panic!(
            "set INFERGATE_OCR_REC_MODEL to the PP-OCRv4 recognition model (plugins/build.sh does)"
        )
    });
    println!("cargo:rerun-if-changed={model}");
    let bytes = fs::read(&model).unwrap_or_else(|e| panic!("reading {model}: {e}"));
    let charset = onnx_metadata(&bytes, "character")
        .unwrap_or_else(|| panic!("{model} has no `character` metadata entry"));
    let symbols: Vec<&str> = charset.lines().collect();
    let mut out = String::from("/// CTC classes: 0 is blank, then the model's charset, then a space.\npub static CLASSES: &[&str] = &[\"\",\n");
    for symbol in symbols.iter().chain([" "].iter()) {
        out.push_str(&format!("{symbol:?},\n"));
    }
    out.push_str("];\n");
    let dest = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("charset.rs");
    fs::write(dest, out).expect("writing charset.rs");
}

/// The value of `key` in an ONNX ModelProto's `metadata_props` (field 14,
/// entries of StringStringEntryProto {key = 1, value = 2}).
fn onnx_metadata(model: &[u8], key: &str) -> Option<String> {
    let mut fields = Fields(model);
    while let Some((number, value)) = fields.next_field()? {
        if number == 14 {
            if let Field::Bytes(entry) = value {
                let (mut k, mut v) = (None, None);
                let mut entry_fields = Fields(entry);
                while let Some((n, f)) = entry_fields.next_field()? {
                    match (n, f) {
                        (1, Field::Bytes(b)) => k = Some(b),
                        (2, Field::Bytes(b)) => v = Some(b),
                        _ => {}
                    }
                }
                if k == Some(key.as_bytes()) {
                    return v.map(|v| String::from_utf8_lossy(v).into_owned());
                }
            }
        }
    }
    None
}

enum Field<'a> {
    Varint,
    Bytes(&'a [u8]),
    Fixed,
}

/// A protobuf wire-format reader: just enough to walk fields.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.0.split_first()?;
            self.0 = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    /// `Some(None)` at the end, `None` on malformed input.
    fn next_field(&mut self) -> Option<Option<(u64, Field<'a>)>> {
        if self.0.is_empty() {
            return Some(None);
        }
        let tag = self.varint()?;
        let field = match tag & 7 {
            0 => {
                self.varint()?;
                Field::Varint
            }
            1 => {
                self.take(8)?;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                Field::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Field::Fixed
            }
            _ => return None,
        };
        Some(Some((tag >> 3, field)))
    }
}
