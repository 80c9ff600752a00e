//! The response cache's key: a SHA-256 digest of every part of a request that can change the
//! answer.
//!
//! The digest is cryptographic because the cache is shared by every caller of a model: with a
//! weaker hash, a caller who could craft a collision would be served another caller's answer.
//!
//! Parts are framed so that two different lists of parts can never produce the same bytes:
//! each part starts with a tag byte that fixes its layout, every variable-length field carries
//! its length (8 bytes, little-endian) before its bytes, and numbers are fixed-width. The
//! framing is therefore prefix-free, and a list of parts is decodable from its bytes (the
//! tests decode it back). Moving bytes from one field to the next (`"ab" + "c"` against
//! `"a" + "bc"`) changes a length, so it changes the digest.
//!
//! The gateway adds parts in a canonical order (inputs in the model's order, outputs as
//! requested, parameters sorted by name): two requests that differ only in the order of their
//! JSON fields then share a key. A part added in another order gives a different key, which
//! costs a miss, never a wrong answer.

use sha2::{Digest, Sha256};

/// Bumped whenever the framing or the meaning of a part changes, so an old key can never equal
/// a new one.
const DOMAIN: &[u8] = b"infergate response cache key v1";

/// A response cache key: 32 bytes of SHA-256, made only by [`KeyBuilder`]. The cache relies
/// on its bytes being uniformly spread (it uses them as its hash), so none can be made by hand.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey([u8; 32]);

impl CacheKey {
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheKey(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

/// Tags: one per kind of part. Never reuse or renumber one.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    Model = 1,
    FileSha256 = 2,
    ConfigDigest = 3,
    Input = 4,
    Output = 5,
    Parameter = 6,
    Stage = 7,
    Prompt = 8,
}

/// Where the framed bytes go: the digest, or a buffer (to look at or decode the framing).
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Builds a [`CacheKey`]. Start with the model and version, add every part that changes the
/// answer, then [`finish`](Self::finish).
///
/// ```
/// use infergate_traffic::cache_key::KeyBuilder;
/// let mut k = KeyBuilder::new("mlp", 2);
/// k.file_sha256(&[0u8; 32]);
/// k.config_digest(b"config-digest");
/// k.input("x", "FP32", &[1, 4], &[0u8; 16]);
/// k.output("y", b"");
/// k.parameter("binary_data_output", b"true");
/// let key = k.finish();
/// assert_ne!(key, KeyBuilder::new("mlp", 3).finish());
/// ```
pub struct KeyBuilder<S = Sha256> {
    sink: S,
}

impl KeyBuilder<Sha256> {
    pub fn new(model: &str, version: u64) -> KeyBuilder<Sha256> {
        KeyBuilder::with_sink(Sha256::new(), model, version)
    }

    pub fn finish(self) -> CacheKey {
        CacheKey(self.sink.finalize().into())
    }
}

impl<S: Sink> KeyBuilder<S> {
    pub fn with_sink(mut sink: S, model: &str, version: u64) -> KeyBuilder<S> {
        sink.put(DOMAIN);
        let mut k = KeyBuilder { sink };
        k.tag(Tag::Model);
        k.field(model.as_bytes());
        k.number(version);
        k
    }

    pub fn into_sink(self) -> S {
        self.sink
    }

    fn tag(&mut self, tag: Tag) {
        self.sink.put(&[tag as u8]);
    }

    fn number(&mut self, n: u64) {
        self.sink.put(&n.to_le_bytes());
    }

    fn field(&mut self, bytes: &[u8]) {
        self.number(bytes.len() as u64);
        self.sink.put(bytes);
    }

    /// The sha256 of the version's model file (raw 32 bytes or its hex: either, consistently).
    pub fn file_sha256(&mut self, sha256: &[u8]) -> &mut Self {
        self.tag(Tag::FileSha256);
        self.field(sha256);
        self
    }

    /// A digest of the version's configuration (batching does not change answers, but
    /// post-ops, labels and output settings do: hash the whole config to be safe).
    pub fn config_digest(&mut self, digest: &[u8]) -> &mut Self {
        self.tag(Tag::ConfigDigest);
        self.field(digest);
        self
    }

    /// One input tensor: name, datatype (`"FP32"`), shape and raw bytes.
    pub fn input(&mut self, name: &str, datatype: &str, shape: &[i64], data: &[u8]) -> &mut Self {
        self.input_pieces(name, datatype, shape, &[data])
    }

    /// One input tensor whose bytes arrived in several pieces: keyed as if joined, without
    /// joining them.
    pub fn input_pieces(
        &mut self,
        name: &str,
        datatype: &str,
        shape: &[i64],
        pieces: &[&[u8]],
    ) -> &mut Self {
        self.tag(Tag::Input);
        self.field(name.as_bytes());
        self.field(datatype.as_bytes());
        self.number(shape.len() as u64);
        for &dim in shape {
            self.number(dim as u64);
        }
        self.number(pieces.iter().map(|p| p.len() as u64).sum());
        for piece in pieces {
            self.sink.put(piece);
        }
        self
    }

    /// A requested output and its own parameters (`binary_data`, `classification`) in a
    /// canonical encoding the gateway chooses (empty when none).
    pub fn output(&mut self, name: &str, parameters: &[u8]) -> &mut Self {
        self.tag(Tag::Output);
        self.field(name.as_bytes());
        self.field(parameters);
        self
    }

    /// A request parameter that changes the answer (post-ops, binary flags; for chat models
    /// every sampling parameter). The value in a canonical encoding (its JSON text will do).
    pub fn parameter(&mut self, name: &str, value: &[u8]) -> &mut Self {
        self.tag(Tag::Parameter);
        self.field(name.as_bytes());
        self.field(value);
        self
    }

    /// A plugin or guardrail that runs around the model: what it is (`"pre-plugin"`,
    /// `"guardrail"`) and its identity (the module's sha256 and its config digest).
    pub fn stage(&mut self, kind: &str, identity: &[u8]) -> &mut Self {
        self.tag(Tag::Stage);
        self.field(kind.as_bytes());
        self.field(identity);
        self
    }

    /// A chat model's rendered prompt (after its chat template).
    pub fn prompt(&mut self, rendered: &[u8]) -> &mut Self {
        self.tag(Tag::Prompt);
        self.field(rendered);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A part as the tests generate and decode them.
    #[derive(Debug, Clone, PartialEq)]
    enum Part {
        FileSha256(Vec<u8>),
        ConfigDigest(Vec<u8>),
        Input(String, String, Vec<i64>, Vec<Vec<u8>>),
        Output(String, Vec<u8>),
        Parameter(String, Vec<u8>),
        Stage(String, Vec<u8>),
        Prompt(Vec<u8>),
    }

    fn add<S: Sink>(k: &mut KeyBuilder<S>, part: &Part) {
        match part {
            Part::FileSha256(b) => k.file_sha256(b),
            Part::ConfigDigest(b) => k.config_digest(b),
            Part::Input(name, dt, shape, pieces) => {
                let pieces: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
                k.input_pieces(name, dt, shape, &pieces)
            }
            Part::Output(name, p) => k.output(name, p),
            Part::Parameter(name, v) => k.parameter(name, v),
            Part::Stage(kind, id) => k.stage(kind, id),
            Part::Prompt(p) => k.prompt(p),
        };
    }

    fn framed(model: &str, version: u64, parts: &[Part]) -> Vec<u8> {
        let mut k = KeyBuilder::with_sink(Vec::new(), model, version);
        for p in parts {
            add(&mut k, p);
        }
        k.into_sink()
    }

    fn key(model: &str, version: u64, parts: &[Part]) -> CacheKey {
        let mut k = KeyBuilder::new(model, version);
        for p in parts {
            add(&mut k, p);
        }
        k.finish()
    }

    /// Reads the framing back. Pieces of one input come back joined, as they are keyed.
    fn decode(mut b: &[u8]) -> Option<(String, u64, Vec<Part>)> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            (b.len() >= n).then(|| {
                let (head, tail) = b.split_at(n);
                *b = tail;
                head
            })
        }
        fn number(b: &mut &[u8]) -> Option<u64> {
            Some(u64::from_le_bytes(take(b, 8)?.try_into().ok()?))
        }
        fn field(b: &mut &[u8]) -> Option<Vec<u8>> {
            let n = number(b)? as usize;
            take(b, n).map(<[u8]>::to_vec)
        }
        fn text(b: &mut &[u8]) -> Option<String> {
            String::from_utf8(field(b)?).ok()
        }
        take(&mut b, DOMAIN.len()).filter(|d| *d == DOMAIN)?;
        (take(&mut b, 1)? == [Tag::Model as u8]).then_some(())?;
        let model = text(&mut b)?;
        let version = number(&mut b)?;
        let mut parts = Vec::new();
        while let Some(tag) = take(&mut b, 1) {
            parts.push(match tag[0] {
                2 => Part::FileSha256(field(&mut b)?),
                3 => Part::ConfigDigest(field(&mut b)?),
                4 => {
                    let (name, dt) = (text(&mut b)?, text(&mut b)?);
                    let rank = number(&mut b)?;
                    let shape = (0..rank)
                        .map(|_| number(&mut b).map(|d| d as i64))
                        .collect::<Option<_>>()?;
                    Part::Input(name, dt, shape, vec![field(&mut b)?])
                }
                5 => Part::Output(text(&mut b)?, field(&mut b)?),
                6 => Part::Parameter(text(&mut b)?, field(&mut b)?),
                7 => Part::Stage(text(&mut b)?, field(&mut b)?),
                8 => Part::Prompt(field(&mut b)?),
                _ => return None,
            });
        }
        Some((model, version, parts))
    }

    fn joined(parts: &[Part]) -> Vec<Part> {
        parts
            .iter()
            .map(|p| match p {
                Part::Input(n, d, s, pieces) => {
                    Part::Input(n.clone(), d.clone(), s.clone(), vec![pieces.concat()])
                }
                other => other.clone(),
            })
            .collect()
    }

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(any::<u8>(), 0..6)
    }

    fn part() -> impl Strategy<Value = Part> {
        let s = "[a-c]{0,3}";
        prop_oneof![
            bytes().prop_map(Part::FileSha256),
            bytes().prop_map(Part::ConfigDigest),
            (
                s,
                s,
                prop::collection::vec(-2i64..3, 0..3),
                prop::collection::vec(bytes(), 0..3)
            )
                .prop_map(|(n, d, sh, p)| Part::Input(n, d, sh, p)),
            (s, bytes()).prop_map(|(n, p)| Part::Output(n, p)),
            (s, bytes()).prop_map(|(n, v)| Part::Parameter(n, v)),
            (s, bytes()).prop_map(|(k, i)| Part::Stage(k, i)),
            bytes().prop_map(Part::Prompt),
        ]
    }

    proptest! {
        // Decoding gives back exactly the parts: the framing is injective, so two different
        // lists of parts can only share a key through a SHA-256 collision.
        #[test]
        fn framing_decodes_back_to_its_parts(
            model in "[a-c]{0,3}", version in 0u64..3, parts in prop::collection::vec(part(), 0..5)
        ) {
            let decoded = decode(&framed(&model, version, &parts));
            prop_assert_eq!(decoded, Some((model, version, joined(&parts))));
        }

        #[test]
        fn different_parts_different_keys(
            a in prop::collection::vec(part(), 0..4), b in prop::collection::vec(part(), 0..4)
        ) {
            let same = joined(&a) == joined(&b);
            prop_assert_eq!(key("m", 1, &a) == key("m", 1, &b), same);
        }
    }

    #[test]
    fn moving_a_boundary_changes_the_key() {
        let p = |n: &str, v: &[u8]| Part::Parameter(n.into(), v.to_vec());
        assert_ne!(key("m", 1, &[p("ab", b"c")]), key("m", 1, &[p("a", b"bc")]));
        assert_ne!(
            key("mo", 1, &[]),
            key("m", 1, &[Part::Prompt(b"o".to_vec())])
        );
        let input = |shape: Vec<i64>, data: &[u8]| {
            Part::Input("x".into(), "FP32".into(), shape, vec![data.to_vec()])
        };
        let data = [0u8; 16];
        assert_ne!(
            key("m", 1, &[input(vec![1, 4], &data)]),
            key("m", 1, &[input(vec![4, 1], &data)])
        );
        let mut changed = data;
        changed[15] = 1;
        assert_ne!(
            key("m", 1, &[input(vec![4], &data)]),
            key("m", 1, &[input(vec![4], &changed)])
        );
        assert_eq!(
            key("m", 1, &[input(vec![4], &data)]),
            key("m", 1, &[input(vec![4], &data)])
        );
        // Pieces are keyed as if joined.
        let split = Part::Input(
            "x".into(),
            "FP32".into(),
            vec![4],
            vec![data[..5].to_vec(), data[5..].to_vec()],
        );
        assert_eq!(key("m", 1, &[split]), key("m", 1, &[input(vec![4], &data)]));
        assert_ne!(key("m", 1, &[]), key("m", 2, &[]));
    }

    #[test]
    fn the_digest_is_pinned() {
        // Keys are compared across replicas and releases: the framing must not drift by
        // accident (bump DOMAIN on purpose instead).
        let mut k = KeyBuilder::new("mlp", 1);
        k.input("x", "FP32", &[1, 2], &[0u8; 8]).output("y", b"");
        let hex: String = k.finish().0.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "2dd216f2027c98634bd4306806624923a9f182368676a96e426da7d070476c71"
        );
    }
}
