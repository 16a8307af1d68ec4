//! Host-side tensor data: seeded inputs, poisoned outputs, and conversion between float64 values
//! and the bytes of each dtype.
//!
//! Poison values written to outputs (and scratch) before a launch, so an element the kernel
//! never writes fails validation:
//! - float types: NaN (quiet NaN of the type);
//! - `i32`: [`I32_POISON`] = `i32::MAX` (0x7fffffff); `i64`, `i8`: their largest value; `u8`:
//!   255 (inputs are small: see [`random_values`]);
//! - 8-bit floats: the NaN byte 0x7f;
//! - `bool`: the byte 0xFF, which is neither 0 nor 1 and reads back as 255.
//!
//! Inputs are [`random_values`], except those an [`InputFill`] fills otherwise: a gather's
//! indices, and packed-document ids (`--documents`, [`DocumentIds`]), which stay below their
//! dtype's poison.

use half::{bf16, f16};
use hopfuse::fusion::{Fusion, IterId, IterKind};
use hopfuse::DType;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::num::NonZeroU32;

pub const I32_POISON: i32 = i32::MAX;
pub const BOOL_POISON: u8 = 0xFF;

/// FNV-1a of `bytes`: the ChaCha stream id of a tensor's values ([`rng_for`]) and of a row's
/// documents ([`DocumentIds`]).
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A generator for one named tensor: the stream depends on the seed and the name only, so a
/// tensor's data does not change when parameters are reordered or added.
pub fn rng_for(seed: u64, name: &str) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(fnv1a(name.bytes()));
    rng
}

/// `n` seeded input values, exactly representable in `dtype`: floats uniform in [-1, 1) before
/// rounding to the dtype (so ±1.0 can occur after it);
/// signed integers in {-8..-1, 1..8} (never 0, so integer division by an input is defined);
/// `u8` in {1..8}; `bool` 0 or 1.
pub fn random_values(dtype: DType, n: usize, rng: &mut ChaCha8Rng) -> Vec<f64> {
    (0..n)
        .map(|_| match dtype {
            DType::U8 => rng.random_range(1..=8u8) as f64,
            DType::I32 | DType::I64 | DType::I8 => {
                let v: i32 = rng.random_range(1..=8);
                if rng.random::<bool>() {
                    -v as f64
                } else {
                    v as f64
                }
            }
            DType::Bool => rng.random::<bool>() as u8 as f64,
            d => representable(d, rng.random_range(-1.0f64..1.0)),
        })
        .collect()
}

/// Values per block of [`seeded_values`].
const SEED_BLOCK: usize = 1 << 20;

/// The values of input `name` of a run with `seed`: [`random_values`] in blocks of 2^20 values,
/// block `b` drawn from the tensor's stream ([`rng_for`]) at word position `b << 40` (blocks
/// never overlap), so large inputs are drawn on every core and the values do not depend on
/// how many there are.
pub fn seeded_values(dtype: DType, n: usize, seed: u64, name: &str) -> Vec<f64> {
    seeded_input(dtype, n, seed, name, InputFill::Random)
}

/// Block `b` (of `len` <= 2^20 values) of [`seeded_values`]: for writers that stream an input
/// block by block (the peers' input files) and must produce the very same values.
pub fn seeded_block(dtype: DType, seed: u64, name: &str, b: usize, len: usize) -> Vec<f64> {
    let mut rng = rng_for(seed, name);
    rng.set_word_pos((b as u128) << 40);
    random_values(dtype, len, &mut rng)
}

/// How a run fills one input tensor. Every consumer of an input's values (the device's bytes
/// and the float64 reference through the engine, the torch peers' input files) gets them from
/// [`seeded_input`] or [`seeded_input_block`] with the input's fill from [`InputFills`], so
/// they cannot differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputFill {
    /// [`random_values`] from the tensor's stream ([`seeded_values`]).
    Random,
    /// A gather's indices ([`index_bounds`]): integers uniform in `[0, bound)`, from the
    /// tensor's stream and blocks.
    Indices { bound: i64 },
    /// Packed-document ids along the last axis, of `row_len` elements ([`DocumentIds`], one
    /// row per index of the leading axes).
    Documents {
        mean_len: NonZeroU32,
        row_len: usize,
    },
}

/// Why a run's input fills cannot be had (the request's `documents`). The messages name the
/// CLI's flag; the service's checks reword it (`run_checks::api_wording`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FillError {
    #[error("--documents `{name}`: not an input of the program ({})", integer_inputs(.integer))]
    UnknownInput { name: String, integer: Vec<String> },
    #[error(
        "--documents `{name}`: `{name}` is {dtype}; document ids fill integer inputs \
         (i32, i64, i8, u8) ({})",
        integer_inputs(.integer)
    )]
    NotInteger {
        name: String,
        dtype: DType,
        integer: Vec<String>,
    },
    #[error("--documents `{name}`: `{name}` is a scalar; document ids fill a tensor along its last axis")]
    Scalar { name: String },
    #[error(
        "--documents `{name}`: `{name}` is read as a gather's indices, which a run draws inside \
         the axis they index"
    )]
    GatherIndices { name: String },
    #[error(
        "--documents `{name}`: its last axis has {row_len} elements, so its ids could reach {}; \
         {dtype} ids must stay below {max} (the poison of unwritten outputs)",
        .row_len - 1
    )]
    IdsOverflow {
        name: String,
        dtype: DType,
        row_len: usize,
        max: i64,
    },
    #[error("--documents `{name}`: {message}")]
    Sizes { name: String, message: String },
    #[error("--documents: the program does not build: {0}")]
    Program(String),
}

/// "its integer inputs: a, b", or that there are none.
fn integer_inputs(names: &[String]) -> String {
    if names.is_empty() {
        "it has no integer tensor input".into()
    } else {
        format!("its integer inputs: {}", names.join(", "))
    }
}

/// The fill of each input tensor of a run whose fill is not [`InputFill::Random`], by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InputFills(BTreeMap<String, InputFill>);

impl InputFills {
    /// A run's fills: each gather's indices inside the axis they index ([`index_bounds`]), and
    /// each input named in `documents` (name -> the documents' mean length) packed documents
    /// along its last axis, checked: an integer tensor input of `source`, not a gather's
    /// indices, with a last axis short enough that every id fits its dtype.
    pub fn resolve(
        source: &str,
        sizes: &BTreeMap<String, i64>,
        documents: &BTreeMap<String, NonZeroU32>,
    ) -> Result<InputFills, FillError> {
        let mut fills: BTreeMap<String, InputFill> = index_bounds(source, sizes)
            .into_iter()
            .map(|(name, bound)| (name, InputFill::Indices { bound }))
            .collect();
        if documents.is_empty() {
            return Ok(InputFills(fills));
        }
        let f = hopfuse::reference_fusion(source).map_err(|d| {
            let first = d.0.first().map(|d| d.message.clone());
            FillError::Program(first.unwrap_or_else(|| "an error".into()))
        })?;
        let integer: Vec<String> = f
            .inputs
            .iter()
            .filter(|&&t| f.tensors[t].dtype.is_integer() && !f.logical(t).is_empty())
            .map(|&t| f.tensors[t].name.clone())
            .collect();
        for (name, &mean_len) in documents {
            let name = name.clone();
            let Some(&t) = f.inputs.iter().find(|&&t| f.tensors[t].name == name) else {
                return Err(FillError::UnknownInput { name, integer });
            };
            let dtype = f.tensors[t].dtype;
            if !dtype.is_integer() {
                return Err(FillError::NotInteger {
                    name,
                    dtype,
                    integer,
                });
            }
            let Some(&last) = f.logical(t).last() else {
                return Err(FillError::Scalar { name });
            };
            if fills.contains_key(&name) {
                return Err(FillError::GatherIndices { name });
            }
            let row_len = axis_len(&f, last, sizes).map_err(|message| FillError::Sizes {
                name: name.clone(),
                message,
            })?;
            // Every document one element long: ids up to row_len - 1, which must stay below
            // the dtype's largest value (an unwritten output's poison, see the module docs).
            let (_, max) = dtype.int_range().expect("an integer type");
            if row_len.saturating_sub(1) as f64 >= max {
                return Err(FillError::IdsOverflow {
                    name,
                    dtype,
                    row_len,
                    max: max as i64,
                });
            }
            fills.insert(name, InputFill::Documents { mean_len, row_len });
        }
        Ok(InputFills(fills))
    }

    /// Input `name`'s fill.
    pub fn of(&self, name: &str) -> InputFill {
        self.0.get(name).copied().unwrap_or(InputFill::Random)
    }
}

/// The extent of axis `id` of a fusion tensor at `sizes` (a broadcast axis: 1).
fn axis_len(f: &Fusion, id: IterId, sizes: &BTreeMap<String, i64>) -> Result<usize, String> {
    if f.ids[id].kind == IterKind::Broadcast {
        return Ok(1);
    }
    let extent = f.class_extent(f.class_of(id));
    let v = extent.eval(sizes).map_err(|e| e.to_string())?;
    usize::try_from(v).map_err(|_| format!("its last axis {extent} = {v} is negative"))
}

/// The inputs of `source` that a `gather` or `index_select` reads as indices, by name, each
/// with the extent of the axis it indexes for `sizes` ([`hopfuse::fusion::build::index_bounds`]):
/// a run draws their values inside `[0, extent)` ([`InputFill::Indices`]), as labels and token
/// ids are, so the torch peers (which raise outside it) take the same inputs. Empty when the
/// program does not build or has no gather.
pub fn index_bounds(source: &str, sizes: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    let Ok(f) = hopfuse::reference_fusion(source) else {
        return BTreeMap::new();
    };
    hopfuse::fusion::build::index_bounds(&f)
        .into_iter()
        .filter_map(|(t, extent)| {
            let n = extent.eval(sizes).ok().filter(|&n| n > 0)?;
            Some((f.tensors[t].name.clone(), n))
        })
        .collect()
}

/// The `n` values of input `name` filled as `fill` says, in blocks of 2^20 values
/// ([`seeded_input_block`]) drawn on every core.
pub fn seeded_input(dtype: DType, n: usize, seed: u64, name: &str, fill: InputFill) -> Vec<f64> {
    let mut out = vec![0.0; n];
    crate::host_parallel::Threads::all().for_chunks(&mut out, SEED_BLOCK, |b, block| {
        block.copy_from_slice(&seeded_input_block(dtype, seed, name, fill, b, block.len()));
    });
    out
}

/// Block `b` (elements `b * 2^20 ..`, `len` <= 2^20 of them) of [`seeded_input`]: the one
/// place an input's values are made, for it and for writers that stream an input block by
/// block (the peers' input files).
pub fn seeded_input_block(
    dtype: DType,
    seed: u64,
    name: &str,
    fill: InputFill,
    b: usize,
    len: usize,
) -> Vec<f64> {
    match fill {
        InputFill::Random => seeded_block(dtype, seed, name, b, len),
        InputFill::Indices { bound } => {
            let mut rng = rng_for(seed, name);
            rng.set_word_pos((b as u128) << 40);
            (0..len)
                .map(|_| rng.random_range(0..bound) as f64)
                .collect()
        }
        InputFill::Documents { mean_len, row_len } => {
            document_block(seed, mean_len, row_len, b * SEED_BLOCK, len)
        }
    }
}

/// Elements `start .. start + len` (flat, row-major) of a tensor filled with packed documents
/// along rows of `row_len`: each row's ids from its own [`DocumentIds`], skipped to the block's
/// first column (a block inside a long row replays that row's document lengths up to it, about
/// `column / mean_len` draws).
fn document_block(
    seed: u64,
    mean_len: NonZeroU32,
    row_len: usize,
    start: usize,
    len: usize,
) -> Vec<f64> {
    // An empty last axis holds no elements (len is 0); max(1) keeps the division defined.
    let row_len = row_len.max(1);
    let mut out = Vec::with_capacity(len);
    let (mut at, end) = (start, start + len);
    while at < end {
        let (row, column) = (at / row_len, at % row_len);
        let take = (row_len - column).min(end - at);
        let mut ids = DocumentIds::new(seed, row as u64, mean_len);
        ids.skip_positions(column as u64);
        out.extend(ids.take(take).map(|id| id as f64));
        at += take;
    }
    out
}

/// The packed-document ids of one row (one index of an input's leading axes, flattened), as
/// an endless iterator: 0 for each position of the first document, 1 for the next, and so on,
/// the documents' lengths uniform in `[1, 2 mean_len - 1]` (mean `mean_len`). The lengths come
/// from a ChaCha stream of the run's seed and the row only, not the tensor's name, so inputs
/// filled with the same mean length share their documents position by position (`doc_q[b, i]
/// == doc_k[b, i]`) whatever their names and row lengths.
pub struct DocumentIds {
    rng: ChaCha8Rng,
    longest: u64,
    id: u64,
    /// Positions of the current document not yet yielded (at least 1 between calls).
    left: u64,
}

impl DocumentIds {
    pub fn new(seed: u64, row: u64, mean_len: NonZeroU32) -> DocumentIds {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // A NUL-led tag: no tensor name (an identifier) hashes from these bytes, so the rows'
        // streams are not a tensor's.
        rng.set_stream(fnv1a(
            b"\0documents".iter().copied().chain(row.to_le_bytes()),
        ));
        let longest = 2 * u64::from(mean_len.get()) - 1;
        let left = rng.random_range(1..=longest);
        DocumentIds {
            rng,
            longest,
            id: 0,
            left,
        }
    }

    /// Skips `n` positions a document at a time: the same draws, in the same order, as `n`
    /// calls of `next`, but about `n / mean_len` steps.
    pub fn skip_positions(&mut self, mut n: u64) {
        while n >= self.left {
            n -= self.left;
            self.start_next_document();
        }
        self.left -= n;
    }

    fn start_next_document(&mut self) {
        self.id += 1;
        self.left = self.rng.random_range(1..=self.longest);
    }
}

impl Iterator for DocumentIds {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.left == 0 {
            self.start_next_document();
        }
        self.left -= 1;
        Some(self.id)
    }
}

/// Values per block of [`seeded_values`] (the unit of [`seeded_block`]).
pub const fn seed_block_len() -> usize {
    SEED_BLOCK
}

/// `v` rounded to the nearest value of `dtype` by the compiler's own rounding
/// ([`DType::round`]), the rounding the reference evaluator uses.
pub fn representable(dtype: DType, v: f64) -> f64 {
    dtype.round(v)
}

/// Little-endian bytes of `values` stored as `dtype`. Values should be representable already
/// ([`representable`]): half types go through f32 (`half`'s `from_f64` rounds twice, through f32,
/// so it is not used).
/// Large tensors are encoded on every core.
pub fn encode(dtype: DType, values: &[f64]) -> Vec<u8> {
    const CHUNK: usize = 1 << 16;
    let w = dtype.size_bytes() as usize;
    let mut out = vec![0u8; values.len() * w];
    crate::host_parallel::Threads::all().for_chunks(&mut out, CHUNK * w, |i, out| {
        let mut bytes = Vec::with_capacity(out.len());
        for &v in &values[i * CHUNK..(i * CHUNK + out.len() / w)] {
            encode_one(dtype, v, &mut bytes);
        }
        out.copy_from_slice(&bytes);
    });
    out
}

fn encode_one(dtype: DType, v: f64, out: &mut Vec<u8>) {
    match dtype {
        DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
        DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&bf16::from_f32(v as f32).to_le_bytes()),
        DType::F16 => out.extend_from_slice(&f16::from_f32(v as f32).to_le_bytes()),
        DType::I32 => out.extend_from_slice(&(dtype.round(v) as i32).to_le_bytes()),
        DType::I64 => out.extend_from_slice(&(dtype.round(v) as i64).to_le_bytes()),
        DType::I8 => out.push(dtype.round(v) as i8 as u8),
        DType::U8 => out.push(dtype.round(v) as u8),
        DType::F8E4M3 | DType::F8E5M2 => out.push(dtype.fp8_to_bits(v).expect("an 8-bit float")),
        DType::Bool => out.push((v != 0.0) as u8),
    }
}

/// Float64 values of little-endian `dtype` bytes. A `bool` byte reads as its integer value, so
/// the poison byte (255) never equals a reference 0 or 1.
/// Large tensors are decoded on every core.
pub fn decode(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    const CHUNK: usize = 1 << 16;
    let w = dtype.size_bytes() as usize;
    let mut out = vec![0.0; bytes.len() / w];
    crate::host_parallel::Threads::all().for_chunks(&mut out, CHUNK, |i, out| {
        let src = &bytes[i * CHUNK * w..];
        for (o, c) in out.iter_mut().zip(src.chunks_exact(w)) {
            *o = match dtype {
                DType::F64 => f64::from_le_bytes(c.try_into().expect("8 bytes")),
                DType::F32 => f32::from_le_bytes(c.try_into().expect("4 bytes")) as f64,
                DType::BF16 => bf16::from_le_bytes([c[0], c[1]]).to_f64(),
                DType::F16 => f16::from_le_bytes([c[0], c[1]]).to_f64(),
                DType::I32 => i32::from_le_bytes(c.try_into().expect("4 bytes")) as f64,
                DType::I64 => i64::from_le_bytes(c.try_into().expect("8 bytes")) as f64,
                DType::I8 => c[0] as i8 as f64,
                DType::U8 | DType::Bool => c[0] as f64,
                DType::F8E4M3 | DType::F8E5M2 => dtype.fp8_from_bits(c[0]).expect("an 8-bit float"),
            };
        }
    });
    out
}

/// The poison bytes of `n` elements of `dtype` (see the module docs).
pub fn poison(dtype: DType, n: usize) -> Vec<u8> {
    let one: Vec<u8> = match dtype {
        DType::F64 => f64::NAN.to_le_bytes().to_vec(),
        DType::F32 => f32::NAN.to_le_bytes().to_vec(),
        DType::BF16 => bf16::NAN.to_le_bytes().to_vec(),
        DType::F16 => f16::NAN.to_le_bytes().to_vec(),
        DType::I32 => I32_POISON.to_le_bytes().to_vec(),
        DType::I64 => i64::MAX.to_le_bytes().to_vec(),
        DType::I8 => vec![i8::MAX as u8],
        DType::U8 => vec![u8::MAX],
        DType::F8E4M3 | DType::F8E5M2 => vec![0x7f],
        DType::Bool => vec![BOOL_POISON],
    };
    one.repeat(n)
}

/// A scalar kernel argument: its bytes in the low end of an 8-byte slot.
pub fn scalar_slot(dtype: DType, v: f64) -> u64 {
    let mut bytes = [0u8; 8];
    let enc = encode(dtype, &[v]);
    bytes[..enc.len()].copy_from_slice(&enc);
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_gathers_index_input_is_drawn_inside_the_axis_it_indexes() {
        let embedding = "fusion e {\n  input table: bf16[V, D]\n  input tokens: i32[T]\n  rows = index_select(table, 0, tokens)\n  output rows\n}\n";
        let sizes: BTreeMap<String, i64> =
            [("T".into(), 3000), ("V".into(), 50257), ("D".into(), 64)].into();
        let bounds = index_bounds(embedding, &sizes);
        assert_eq!(bounds, [("tokens".to_string(), 50257)].into());
        let n = SEED_BLOCK + 77;
        let fill = InputFills::resolve(embedding, &sizes, &BTreeMap::new())
            .unwrap()
            .of("tokens");
        assert_eq!(fill, InputFill::Indices { bound: 50257 });
        let ids = seeded_input(DType::I32, n, 3, "tokens", fill);
        assert!(ids
            .iter()
            .all(|&v| (0.0..50257.0).contains(&v) && v.fract() == 0.0));
        // Spread over the axis, not the plain inputs' {-8..8}.
        assert!(ids.iter().any(|&v| v > 1000.0) && ids.iter().any(|&v| v < 1000.0));
        // Deterministic, and the blocks a streaming writer produces are the same values.
        assert_eq!(ids, seeded_input(DType::I32, n, 3, "tokens", fill));
        let streamed: Vec<f64> = (0..2)
            .flat_map(|b| {
                let len = SEED_BLOCK.min(n - b * SEED_BLOCK);
                seeded_input_block(DType::I32, 3, "tokens", fill, b, len)
            })
            .collect();
        assert_eq!(ids, streamed);
        // Without a bound: the plain values.
        assert_eq!(
            seeded_input(DType::I32, 100, 3, "x", InputFill::Random),
            seeded_values(DType::I32, 100, 3, "x")
        );
        // No gather, or a program that does not build: no bounds.
        assert!(index_bounds(
            "fusion f {\n  input x: f32[N]\n  y = x\n  output y\n}\n",
            &sizes
        )
        .is_empty());
        assert!(index_bounds("@@", &sizes).is_empty());
    }

    use super::*;

    const DOCUMENT_ATTENTION: &str = include_str!("../../examples/auto/attention_document.hf");

    fn mean(l: u32) -> NonZeroU32 {
        NonZeroU32::new(l).unwrap()
    }

    fn documents(pairs: &[(&str, u32)]) -> BTreeMap<String, NonZeroU32> {
        pairs
            .iter()
            .map(|&(n, l)| (n.to_string(), mean(l)))
            .collect()
    }

    fn attention_sizes(b: i64, s: i64, t: i64) -> BTreeMap<String, i64> {
        [("B".into(), b), ("S".into(), s), ("T".into(), t)].into()
    }

    /// Each row: ids from 0, up by one at each document's start (whole numbers, never down).
    fn assert_packed_rows(ids: &[f64], row_len: usize) {
        for row in ids.chunks(row_len) {
            assert_eq!(row[0], 0.0);
            for w in row.windows(2) {
                assert!(w[1] == w[0] || w[1] == w[0] + 1.0, "{:?}", w);
            }
            assert!(row.iter().all(|v| v.fract() == 0.0));
        }
    }

    #[test]
    fn documents_are_packed_runs_shared_by_inputs_of_the_same_mean_length() {
        let sizes = attention_sizes(3, 1000, 1537);
        let fills = InputFills::resolve(
            DOCUMENT_ATTENTION,
            &sizes,
            &documents(&[("doc_q", 8), ("doc_k", 8)]),
        )
        .unwrap();
        let (q, k) = (fills.of("doc_q"), fills.of("doc_k"));
        assert_eq!(
            q,
            InputFill::Documents {
                mean_len: mean(8),
                row_len: 1000
            }
        );
        assert_eq!(fills.of("q"), InputFill::Random);
        let doc_q = seeded_input(DType::I32, 3 * 1000, 5, "doc_q", q);
        let doc_k = seeded_input(DType::I32, 3 * 1537, 5, "doc_k", k);
        assert_packed_rows(&doc_q, 1000);
        assert_packed_rows(&doc_k, 1537);
        // Position by position the same documents: doc_q[b, i] == doc_k[b, i] for i < S.
        for b in 0..3 {
            assert_eq!(
                doc_q[b * 1000..(b + 1) * 1000],
                doc_k[b * 1537..b * 1537 + 1000]
            );
        }
        // Rows differ from each other; the name does not matter; the seed does.
        assert_ne!(doc_q[..1000], doc_q[1000..2000]);
        assert_eq!(doc_q, seeded_input(DType::I32, 3000, 5, "anything", q));
        assert_eq!(doc_q, seeded_input(DType::I32, 3000, 5, "doc_q", q));
        assert_ne!(doc_q, seeded_input(DType::I32, 3000, 6, "doc_q", q));
        // Another mean length, other documents.
        let longer = InputFill::Documents {
            mean_len: mean(64),
            row_len: 1000,
        };
        assert_ne!(doc_q, seeded_input(DType::I32, 3000, 5, "doc_q", longer));
    }

    #[test]
    fn documents_lengths_average_the_mean_length() {
        for l in [1u32, 4, 16, 300] {
            let row_len = 200_000;
            let fill = InputFill::Documents {
                mean_len: mean(l),
                row_len,
            };
            let ids = seeded_input(DType::I64, 4 * row_len, 2, "d", fill);
            assert_packed_rows(&ids, row_len);
            // Whole documents only: each row's last one may be cut short.
            let (mut docs, mut positions) = (0usize, 0usize);
            let mut longest = 0;
            for row in ids.chunks(row_len) {
                let last = *row.last().unwrap();
                let whole = row.iter().filter(|&&v| v < last).count();
                docs += last as usize;
                positions += whole;
                let mut run = 1;
                for w in row[..whole].windows(2) {
                    run = if w[1] == w[0] { run + 1 } else { 1 };
                    longest = longest.max(run);
                }
            }
            // Within 4 standard errors of L (lengths uniform in [1, 2L - 1]).
            let average = positions as f64 / docs as f64;
            let spread = ((((2 * l - 1) as f64).powi(2) - 1.0) / 12.0).sqrt();
            assert!(
                (average - l as f64).abs() <= 4.0 * spread / (docs as f64).sqrt(),
                "L = {l}: {average} over {docs} documents"
            );
            assert!(longest < 2 * l as usize, "L = {l}: {longest}");
            if l == 1 {
                // Every document one long: the ids count the positions.
                let expected: Vec<f64> = (0..row_len).map(|i| i as f64).collect();
                assert_eq!(ids[..row_len], expected[..]);
            }
        }
    }

    #[test]
    fn documents_blocks_are_the_rows_however_they_are_cut() {
        // Rows longer than a block, so blocks start and end inside rows.
        let row_len = SEED_BLOCK + SEED_BLOCK / 2 + 7;
        let n = 2 * row_len;
        let fill = InputFill::Documents {
            mean_len: mean(1000),
            row_len,
        };
        let ids = seeded_input(DType::I32, n, 9, "d", fill);
        let streamed: Vec<f64> = (0..n.div_ceil(SEED_BLOCK))
            .flat_map(|b| {
                let len = SEED_BLOCK.min(n - b * SEED_BLOCK);
                seeded_input_block(DType::I32, 9, "d", fill, b, len)
            })
            .collect();
        assert_eq!(ids, streamed);
        // Skipping a document at a time draws what stepping one position at a time does.
        for row in 0..2 {
            let stepped: Vec<f64> = DocumentIds::new(9, row as u64, mean(1000))
                .take(row_len)
                .map(|id| id as f64)
                .collect();
            assert_eq!(ids[row * row_len..(row + 1) * row_len], stepped[..]);
        }
        // Through the dtype's bytes unchanged.
        assert_eq!(decode(DType::I32, &encode(DType::I32, &ids)), ids);
    }

    #[test]
    fn documents_are_refused_where_they_cannot_fill() {
        let sizes = attention_sizes(2, 64, 64);
        let resolve = |pairs: &[(&str, u32)]| {
            InputFills::resolve(DOCUMENT_ATTENTION, &sizes, &documents(pairs))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert_eq!(resolve(&[("doc_q", 4)]), Ok(()));
        assert_eq!(
            resolve(&[("doc", 4)]).unwrap_err(),
            "--documents `doc`: not an input of the program (its integer inputs: doc_q, doc_k)"
        );
        assert_eq!(
            resolve(&[("q", 4)]).unwrap_err(),
            "--documents `q`: `q` is bf16; document ids fill integer inputs (i32, i64, i8, u8) \
             (its integer inputs: doc_q, doc_k)"
        );
        // A scalar input, a gather's indices, ids past the poison of an i8.
        let scalar = "fusion f {\n  input x: f32[N]\n  input k: i32\n  y = x * k\n  output y\n}\n";
        let n: BTreeMap<String, i64> = [("N".into(), 8)].into();
        let err = InputFills::resolve(scalar, &n, &documents(&[("k", 2)])).unwrap_err();
        assert_eq!(err, FillError::Scalar { name: "k".into() });
        assert!(err.to_string().contains("`k` is a scalar"), "{err}");
        let err = InputFills::resolve(scalar, &n, &documents(&[("x", 2)])).unwrap_err();
        assert!(
            err.to_string().contains("(it has no integer tensor input)"),
            "{err}"
        );
        let gather = "fusion e {\n  input table: bf16[V, D]\n  input tokens: i32[T]\n  rows = index_select(table, 0, tokens)\n  output rows\n}\n";
        let vtd: BTreeMap<String, i64> =
            [("V".into(), 50), ("T".into(), 9), ("D".into(), 4)].into();
        let err = InputFills::resolve(gather, &vtd, &documents(&[("tokens", 2)])).unwrap_err();
        assert_eq!(
            err,
            FillError::GatherIndices {
                name: "tokens".into()
            }
        );
        let bytes = |axis: i64| {
            let source = "fusion b {\n  input d: i8[B, S]\n  y = d + d\n  output y\n}\n";
            let sizes = [("B".into(), 2), ("S".into(), axis)].into();
            InputFills::resolve(source, &sizes, &documents(&[("d", 64)]))
        };
        assert!(bytes(127).is_ok());
        let err = bytes(128).unwrap_err().to_string();
        assert!(
            err.contains("could reach 127; i8 ids must stay below 127"),
            "{err}"
        );
        // A size missing, a program that does not build.
        let err = InputFills::resolve(
            DOCUMENT_ATTENTION,
            &BTreeMap::new(),
            &documents(&[("doc_q", 4)]),
        )
        .unwrap_err();
        assert!(matches!(err, FillError::Sizes { .. }), "{err}");
        assert!(matches!(
            InputFills::resolve("@@", &sizes, &documents(&[("d", 4)])),
            Err(FillError::Program(_))
        ));
        // No documents asked for: only a program's gathers, whatever else is wrong with it.
        assert_eq!(
            InputFills::resolve("@@", &sizes, &BTreeMap::new()),
            Ok(InputFills::default())
        );
    }

    /// Blocks come from their own positions of the tensor's stream, whoever draws them.
    #[test]
    fn seeded_values_are_blocks_of_the_stream() {
        let n = 2 * SEED_BLOCK + 1000;
        let v = seeded_values(DType::BF16, n, 9, "x");
        assert_eq!(v, seeded_values(DType::BF16, n, 9, "x"));
        for b in 0..3 {
            let mut rng = rng_for(9, "x");
            rng.set_word_pos((b as u128) << 40);
            let start = b * SEED_BLOCK;
            let len = SEED_BLOCK.min(n - start);
            assert_eq!(
                v[start..start + len],
                random_values(DType::BF16, len, &mut rng)[..]
            );
        }
        // Blocks are not copies of each other, and another name is another stream.
        assert_ne!(v[..1000], v[SEED_BLOCK..SEED_BLOCK + 1000]);
        assert_ne!(v[..1000], seeded_values(DType::BF16, 1000, 9, "y")[..]);
        // Encoding in chunks is encoding one by one.
        let bytes = encode(DType::BF16, &v);
        let mut one_by_one = Vec::new();
        for &x in &v {
            encode_one(DType::BF16, x, &mut one_by_one);
        }
        assert_eq!(bytes, one_by_one);
        assert_eq!(decode(DType::BF16, &bytes), v);
    }

    #[test]
    fn inputs_are_seeded_nonzero_and_representable() {
        for dtype in DType::ALL.into_iter().filter(|&d| d != DType::Bool) {
            let a = random_values(dtype, 1000, &mut rng_for(1, "x"));
            let b = random_values(dtype, 1000, &mut rng_for(1, "x"));
            let c = random_values(dtype, 1000, &mut rng_for(1, "w"));
            let d = random_values(dtype, 1000, &mut rng_for(2, "x"));
            assert_eq!(a, b);
            assert_ne!(a, c);
            assert_ne!(a, d);
            assert!(a.iter().filter(|&&v| v != 0.0).count() > 990, "{dtype}");
            assert!(a.iter().all(|&v| (-8.0..8.0 + 1e-9).contains(&v)));
            if dtype.is_float() {
                assert!(a.iter().all(|&v| (-1.0..=1.0).contains(&v)));
            } else {
                assert!(a
                    .iter()
                    .all(|&v| v != 0.0 && v.fract() == 0.0 && v.abs() <= 8.0));
            }
            // Round trip through the device bytes is exact.
            assert_eq!(decode(dtype, &encode(dtype, &a)), a, "{dtype}");
        }
    }

    #[test]
    fn compiler_rounding_agrees_with_half_from_f32() {
        // `half`'s f32 → f16/bf16 conversions round once, to nearest even: an independent check
        // of `DType::round` on f32 values.
        let mut rng = rng_for(7, "round");
        for _ in 0..50_000 {
            let v = (rng.random_range(-4.0..4.0) * 10f64.powi(rng.random_range(-9..5))) as f32;
            assert_eq!(
                DType::F16.round(v as f64),
                f16::from_f32(v).to_f64(),
                "f16 {v:e}"
            );
            assert_eq!(
                DType::BF16.round(v as f64),
                bf16::from_f32(v).to_f64(),
                "bf16 {v:e}"
            );
        }
    }

    #[test]
    fn poison_decodes_to_values_that_fail_validation() {
        for dtype in [
            DType::F32,
            DType::BF16,
            DType::F16,
            DType::F64,
            DType::F8E4M3,
            DType::F8E5M2,
        ] {
            let p = decode(dtype, &poison(dtype, 3));
            assert_eq!(p.len(), 3);
            assert!(p.iter().all(|v| v.is_nan()), "{dtype}");
        }
        assert_eq!(
            decode(DType::I32, &poison(DType::I32, 2)),
            vec![2147483647.0; 2]
        );
        assert_eq!(decode(DType::Bool, &poison(DType::Bool, 1)), vec![255.0]);
        // Inputs are within ±8: the integer poisons are never a value a kernel computes from
        // them by accident in a copy.
        assert_eq!(decode(DType::I8, &poison(DType::I8, 1)), vec![127.0]);
        assert_eq!(decode(DType::U8, &poison(DType::U8, 1)), vec![255.0]);
        assert_eq!(
            decode(DType::I64, &poison(DType::I64, 1)),
            vec![i64::MAX as f64]
        );
    }

    #[test]
    fn scalar_slots_hold_the_low_bytes() {
        assert_eq!(scalar_slot(DType::F32, 1.0), 1.0f32.to_bits() as u64);
        assert_eq!(scalar_slot(DType::I32, -1.0), 0xffff_ffff);
        assert_eq!(scalar_slot(DType::BF16, 1.0), 0x3f80);
        assert_eq!(scalar_slot(DType::F16, 1.0), 0x3c00);
        assert_eq!(scalar_slot(DType::F64, 2.0), 2.0f64.to_bits());
    }
}
