//! The one JSON reader of the service's answers: a text into a `hopfuse_api` type through its
//! derived `Deserialize`. The text is parsed into a [`serde_json::Value`] (the page's one JSON
//! parser) and read from it by a serde `Deserializer` that gives each derived reader only the
//! JSON shapes serde_json writes for these types:
//! - a struct (or struct variant) is an object, handed to the struct's derived `visit_seq` as
//!   the sequence of its fields in the order the type declares them (serde passes their names;
//!   this is the path non-self-describing formats such as bincode take). Unknown keys are
//!   skipped unread. An absent key reads as `null` where that is a value of the field's type
//!   (an `Option` is `None`, as with serde's own reading of an object), and otherwise ends the
//!   sequence at that field: serde's reader then takes the field's `#[serde(default)]`, or
//!   fails, which is reported as serde's "missing field `name`". A struct written as an array
//!   is refused;
//! - an enum is a variant name (a unit variant) or an object with one key, the variant taken by
//!   its index in the enum's variant list (one name lookup for every enum; an unknown name is
//!   serde's "unknown variant" error);
//! - arrays and tuples are arrays (through the same sequence type as a struct's fields), maps
//!   are objects, numbers and strings as themselves.
//!
//! Why not `serde_json::from_str`: size. Each derived reader is monomorphised for the
//! deserializer it meets; with serde_json's, every struct carries a `visit_map` (a match on its
//! field names, a duplicate check per field) and a `visit_seq`, and the page's ~50 answer types
//! cost 40.4 KiB of brotli-compressed wasm over the hand-written accessors this replaced. Here
//! only `visit_seq` is instantiated per struct and only a variant-index reader per enum, and the
//! work that does not depend on the type is kept out of the generic functions: about 14 KiB
//! (measured with scripts/build-web.sh; the cold-load budget is scripts/test-web.sh's). The
//! values are serde_json's (the tests compare both on every recorded answer), the errors serde's
//! messages without a line and column.

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Error as _, IntoDeserializer, Unexpected, Visitor,
};
use serde_json::{Error, Map, Value};

/// `T` from a parsed JSON value (see the module doc for what is accepted).
pub fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, Error> {
    T::deserialize(Reader(v))
}

/// `T` from JSON text: parsed into a [`Value`] (one text parser for every type), then read.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    from_value(serde_json::from_str::<Value>(text)?)
}

/// What a value is, for error messages.
fn unexpected(v: &Value) -> Unexpected<'_> {
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => Unexpected::Float(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

fn wrong<'de, V: Visitor<'de>>(v: &Value, visitor: &V) -> Error {
    Error::invalid_type(unexpected(v), visitor)
}

/// One value as a deserializer.
struct Reader(Value);

impl<'de> de::Deserializer<'de> for Reader {
    type Error = Error;

    /// Self-describing types (a `Value` field): every shape.
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => visitor.visit_u64(u),
                (None, Some(i)) => visitor.visit_i64(i),
                _ => visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => visitor.visit_string(s),
            Value::Array(a) => visitor.visit_seq(&mut FieldValues::elements(a)),
            Value::Object(m) => visitor.visit_map(Fields::new(m)),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Bool(b) => visitor.visit_bool(b),
            other => Err(wrong(&other, &visitor)),
        }
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0.as_u64() {
            Some(u) => visitor.visit_u64(u),
            None => Err(wrong(&self.0, &visitor)),
        }
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0.as_i64() {
            Some(i) => visitor.visit_i64(i),
            None => Err(wrong(&self.0, &visitor)),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0.as_f64() {
            Some(f) => visitor.visit_f64(f),
            None => Err(wrong(&self.0, &visitor)),
        }
    }

    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_u64(visitor)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_u64(visitor)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_u64(visitor)
    }
    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(s) => visitor.visit_string(s),
            other => Err(wrong(&other, &visitor)),
        }
    }
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_string(visitor)
    }
    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_string(visitor)
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(s) => visitor.visit_str(&s),
            other => Err(wrong(&other, &visitor)),
        }
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            v => visitor.visit_some(Reader(v)),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            other => Err(wrong(&other, &visitor)),
        }
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(a) => visitor.visit_seq(&mut FieldValues::elements(a)),
            other => Err(wrong(&other, &visitor)),
        }
    }
    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(m) => visitor.visit_map(Fields::new(m)),
            other => Err(wrong(&other, &visitor)),
        }
    }
    /// Objects only, read as the sequence of the struct's fields in the order the type declares
    /// them (see the module doc).
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(m) => visit_fields(m, fields, visitor),
            other => Err(wrong(&other, &visitor)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(Variant::of(self.0, variants)?)
    }

    /// An unknown field's value: dropped unread.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

/// An object's values for the fields `fields` (a struct's, in the order it declares them), given
/// to the struct's `visit_seq`: an unknown key is left out unread, an absent one is the end of
/// the struct's sequence at that field (serde's derived reader then takes the field's default
/// where it has one, `#[serde(default)]`, and fails otherwise), except where `null` reads as the
/// field's type (an `Option` is `None`, as serde's own absent `Option` field). The failure for
/// an absent field that has no default is serde's "missing field" error, naming it.
fn visit_fields<'de, V: Visitor<'de>>(
    m: Map<String, Value>,
    fields: &'static [&'static str],
    visitor: V,
) -> Result<V::Value, Error> {
    let mut values = FieldValues::of(m, fields);
    visitor.visit_seq(&mut values).map_err(|e| values.error(e))
}

/// See [`visit_fields`].
struct FieldValues {
    values: std::vec::IntoIter<(&'static str, Option<Value>)>,
    /// The field just read as absent (the sequence ended there), until the next one is read.
    absent: Option<&'static str>,
}

// The work that does not depend on the struct's or the field's type is kept out of the generic
// functions (`inline(never)`), so that it is not copied into each of their instantiations.
impl FieldValues {
    #[inline(never)]
    fn of(mut m: Map<String, Value>, fields: &'static [&'static str]) -> FieldValues {
        FieldValues {
            values: (fields.iter().map(|&f| (f, m.remove(f))))
                .collect::<Vec<_>>()
                .into_iter(),
            absent: None,
        }
    }

    /// An array's elements: every one present (the same `SeqAccess` type as a struct's fields,
    /// so that a type read both as an element and as a field has one reader).
    #[inline(never)]
    fn elements(a: Vec<Value>) -> FieldValues {
        FieldValues {
            values: (a.into_iter().map(|v| ("", Some(v))))
                .collect::<Vec<_>>()
                .into_iter(),
            absent: None,
        }
    }

    /// The struct's reader failed with `e`: right at a field the object does not have, that is
    /// serde's missing-field error naming it.
    #[inline(never)]
    fn error(&self, e: Error) -> Error {
        match self.absent {
            Some(field) => Error::missing_field(field),
            None => e,
        }
    }

    #[inline(never)]
    fn next_field(&mut self) -> Option<(&'static str, Option<Value>)> {
        self.absent = None;
        self.values.next()
    }
}

impl<'de> de::SeqAccess<'de> for FieldValues {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.next_field() {
            None => Ok(None),
            Some((_, Some(v))) => seed.deserialize(Reader(v)).map(Some),
            // Absent: null where that reads as the field's type, else the field's default (or
            // its missing-field error, see `visit_fields`).
            Some((field, None)) => match seed.deserialize(Reader(Value::Null)) {
                Ok(v) => Ok(Some(v)),
                Err(_) => {
                    self.absent = Some(field);
                    Ok(None)
                }
            },
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.values.len())
    }
}

/// The entries of an object; its keys are read as strings (field names, map keys, variants).
struct Fields {
    entries: serde_json::map::IntoIter,
    value: Option<Value>,
}

impl Fields {
    fn new(m: Map<String, Value>) -> Fields {
        Fields {
            entries: m.into_iter(),
            value: None,
        }
    }
}

impl<'de> de::MapAccess<'de> for Fields {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(key.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.value.take() {
            Some(v) => seed.deserialize(Reader(v)),
            None => Err(Error::custom("a value without its key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An externally tagged variant: `{"variant": value}`.
struct Variant {
    /// Its place in the enum's list of variants (serde's derived readers take a variant by
    /// index as well as by name; by index, no reader of the names is instantiated per enum).
    index: u32,
    value: Value,
}

impl Variant {
    /// Both forms, `"variant"` (a unit variant: its value is null) and `{"variant": value}`,
    /// through this one `EnumAccess` type, so each enum's reader is instantiated once.
    #[inline(never)]
    fn of(v: Value, variants: &'static [&'static str]) -> Result<Variant, Error> {
        let (name, value) = match v {
            Value::String(s) => (s, Value::Null),
            Value::Object(m) if m.len() == 1 => m.into_iter().next().expect("one entry"),
            other => {
                return Err(Error::invalid_type(
                    unexpected(&other),
                    &"a variant name or an object with one key",
                ))
            }
        };
        match variants.iter().position(|&v| v == name) {
            Some(index) => Ok(Variant {
                index: index as u32,
                value,
            }),
            None => Err(Error::unknown_variant(&name, variants)),
        }
    }
}

impl<'de> de::EnumAccess<'de> for Variant {
    type Error = Error;
    type Variant = Reader;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Reader), Error> {
        let tag = seed.deserialize(self.index.into_deserializer())?;
        Ok((tag, Reader(self.value)))
    }
}

impl<'de> de::VariantAccess<'de> for Reader {
    type Error = Error;

    #[inline(never)]
    fn unit_variant(self) -> Result<(), Error> {
        match self.0 {
            Value::Null => Ok(()),
            other => Err(Error::invalid_type(unexpected(&other), &"a unit variant")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_struct(self, "", fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use hopfuse_api::job::{JobEvent, JobResult};
    use hopfuse_api::service::Link;

    /// Every recorded `done` event reads into the same job result as with serde_json's own
    /// reader (compared as the JSON each writes back).
    #[test]
    fn the_done_fixtures_read_as_serde_json_reads_them() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
        let mut read = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !(name.starts_with("done-") && name.ends_with(".json")) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let ours: JobEvent = super::from_str(&text).expect(&name);
            let theirs: JobEvent = serde_json::from_str(&text).expect(&name);
            assert!(ours.result.is_some(), "{name}");
            assert_eq!(
                serde_json::to_value(&ours).unwrap(),
                serde_json::to_value(&theirs).unwrap(),
                "{name}"
            );
            read += 1;
        }
        assert!(read >= 8, "only {read} done fixtures");
    }

    /// An absent field: `None` for an `Option`, the default of a `#[serde(default)]` field, and
    /// otherwise serde's missing-field error naming it, as serde_json reads the same object;
    /// after a defaulted field the next fields are still read. Unknown variants are serde's
    /// error, a variant is found by its name.
    #[test]
    fn absent_fields_and_variants_read_as_serde_json_reads_them() {
        use hopfuse_api::profile::{Profile, ProfileReport, Unavailable};
        use hopfuse_api::run::PeersReport;
        // `stalls`, `stall_unit`, `metrics` and `ncu` default; the `Option`s are absent.
        let text = r#"{"kernel": "k", "flops": 2.5}"#;
        let ours: Profile = super::from_str(text).unwrap();
        assert_eq!(ours, serde_json::from_str::<Profile>(text).unwrap());
        assert_eq!((ours.kernel.as_str(), ours.flops), ("k", Some(2.5)));
        assert!(ours.duration_ns.is_none() && ours.stalls.is_empty() && ours.ncu.is_empty());
        // A defaulted field in the middle (`rounds`), then one that is there (`best`).
        let text = r#"{"torch": "2.11", "best": "eager", "speedup_max": 1.5}"#;
        let ours: PeersReport = super::from_str(text).unwrap();
        assert_eq!(ours, serde_json::from_str::<PeersReport>(text).unwrap());
        assert_eq!((ours.rounds, ours.best.as_deref()), (0, Some("eager")));
        for text in [r#"{"flops": 1}"#, r#"{"duration_ns": null}"#] {
            let e = super::from_str::<Profile>(text).unwrap_err().to_string();
            assert_eq!(e, "missing field `kernel`");
        }
        // Enums: unit and struct variants by name, an unknown one refused with the names.
        let text = r#"{"unavailable": {"reason": "no_permission", "message": "m"}}"#;
        let ours: ProfileReport = super::from_str(text).unwrap();
        assert_eq!(ours, serde_json::from_str::<ProfileReport>(text).unwrap());
        let ProfileReport::Unavailable { reason, .. } = ours else {
            panic!("{ours:?}")
        };
        assert_eq!(reason, Unavailable::NoPermission);
        let e = super::from_str::<Unavailable>(r#""no_gpu""#)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("unknown variant `no_gpu`, expected one of `no_ncu`"),
            "{e}"
        );
        assert!(super::from_str::<Unavailable>(r#"{"no_ncu": 1}"#).is_err());
        assert!(super::from_str::<Unavailable>("7").is_err());
    }

    /// Unknown fields are skipped, missing ones and wrong shapes refused, and a struct written
    /// as an array (which serde_json alone accepts) is refused.
    #[test]
    fn only_the_shapes_the_service_writes() {
        let job = r#"{"job_id": "j", "status": "passed", "fake": false, "progress": ["launch", "profile"],
                     "queued_ms": 1, "worker_ms": 2.5, "new_field": [1, {"x": null}]}"#;
        let r: JobResult = super::from_str(job).unwrap();
        assert_eq!((r.job_id.as_str(), r.worker_ms), ("j", 2.5));
        assert_eq!(r.progress.len(), 2);
        assert!(super::from_str::<JobResult>(r#"{"job_id": "j"}"#)
            .unwrap_err()
            .to_string()
            .contains("missing field"));
        let e = super::from_str::<JobResult>(&job.replace("\"passed\"", "7")).unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
        // (its 17 fields in order; the 14th is the distributed mode's `agent`, the 15th a tune
        // job's `tune`)
        let as_array = r#"["j", "passed", false, null, null, null, null, null, [], null, null, null, null, null, null, 1, 2]"#;
        assert!(serde_json::from_str::<JobResult>(as_array).is_ok());
        assert!(super::from_str::<JobResult>(as_array).is_err());
        // A `Value` field (a link's state) takes any JSON, numbers as they were.
        let text = r#"{"id": "x", "program": "p", "created_at": -3,
                       "state": {"a": [1, -2, 2.5, "s", true, null], "b": {}}}"#;
        let link: Link = super::from_str(text).unwrap();
        assert_eq!(link, serde_json::from_str::<Link>(text).unwrap());
        assert_eq!(link.state["a"][1], -2);
        assert!(super::from_str::<Link>("[]").is_err());
    }
}
