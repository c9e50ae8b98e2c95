//! JSON with every object's members sorted by key, written straight from a
//! `Serialize` value: the form of an audit event's canonical bytes
//! ([`crate::merkle::event_canonical_bytes`]).
//!
//! The form is defined as what `serde_json` writes for the value after
//! turning it into a `serde_json::Value` (whose maps order their keys by
//! bytes): no whitespace, integers in decimal, strings escaped as
//! `serde_json` escapes them, a member written twice under one key kept
//! once with its last value. This writer gives the same bytes without
//! building the value tree: scalars and arrays are written in place, and an
//! object's members are written into a buffer of their own and copied out
//! in key order when it ends. Strings and numbers are written by
//! `serde_json` itself, so their escapes and digits are its own.
//! `tests::the_writer_writes_what_the_value_tree_writes` and the property
//! test in `tests/properties.rs` (every event of random histories) hold it
//! to the definition.

use std::fmt;
use std::ops::Range;

use serde::ser::{self, Serialize};

/// The value's JSON with every object's keys sorted (bytewise).
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(256);
    value.serialize(Writer { out: &mut out })?;
    Ok(out)
}

/// A value the form cannot hold: a map key that is not a string, a number or
/// a unit variant, a 128-bit integer, or an error of the value's own.
#[derive(Debug)]
pub(crate) struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Error {
        Error(message.to_string())
    }
}

/// Writes a scalar through `serde_json`, whose escapes and digits define the form.
fn scalar<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), Error> {
    serde_json::to_writer(out, value).map_err(|error| Error(error.to_string()))
}

/// Writes one value into `out`.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> ser::Serializer for Writer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Array<'a>;
    type SerializeTuple = Array<'a>;
    type SerializeTupleStruct = Array<'a>;
    type SerializeTupleVariant = Array<'a>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Object<'a>;

    fn serialize_bool(self, value: bool) -> Result<(), Error> {
        scalar(self.out, &value)
    }
    fn serialize_i8(self, value: i8) -> Result<(), Error> {
        scalar(self.out, &value)
    }
    fn serialize_i16(self, value: i16) -> Result<(), Error> {
        scalar(self.out, &value)
    }
    fn serialize_i32(self, value: i32) -> Result<(), Error> {
        scalar(self.out, &value)
    }
    fn serialize_i64(self, value: i64) -> Result<(), Error> {
        scalar(self.out, &value)
    }
    fn serialize_u8(self, value: u8) -> Result<(), Error> {
        scalar(self.out, &value)
    }
    fn serialize_u16(self, value: u16) -> Result<(), Error> {
        scalar(self.out, &value)
    }
    fn serialize_u32(self, value: u32) -> Result<(), Error> {
        scalar(self.out, &value)
    }
    fn serialize_u64(self, value: u64) -> Result<(), Error> {
        scalar(self.out, &value)
    }
    fn serialize_f32(self, value: f32) -> Result<(), Error> {
        // As the value tree holds it: widened to a double.
        self.serialize_f64(f64::from(value))
    }
    fn serialize_f64(self, value: f64) -> Result<(), Error> {
        // The value tree holds a non-finite number as null, as serde_json writes it.
        scalar(self.out, &value)
    }
    fn serialize_char(self, value: char) -> Result<(), Error> {
        scalar(self.out, &value)
    }
    fn serialize_str(self, value: &str) -> Result<(), Error> {
        scalar(self.out, value)
    }
    fn serialize_bytes(self, value: &[u8]) -> Result<(), Error> {
        // An array of numbers, as the value tree holds bytes.
        scalar(self.out, value)
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        // An object of one member needs no sorting.
        self.out.push(b'{');
        scalar(self.out, variant)?;
        self.out.push(b':');
        value.serialize(Writer { out: &mut *self.out })?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Array<'a>, Error> {
        Ok(Array::open(self.out, false))
    }
    fn serialize_tuple(self, len: usize) -> Result<Array<'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Array<'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Array<'a>, Error> {
        self.out.push(b'{');
        scalar(self.out, variant)?;
        self.out.push(b':');
        Ok(Array::open(self.out, true))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Object<'a>, Error> {
        Ok(Object::open(self.out, len.unwrap_or(0), false))
    }
    fn serialize_struct(self, _name: &'static str, len: usize) -> Result<Object<'a>, Error> {
        Ok(Object::open(self.out, len, false))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Object<'a>, Error> {
        self.out.push(b'{');
        scalar(self.out, variant)?;
        self.out.push(b':');
        Ok(Object::open(self.out, len, true))
    }
}

/// An array, written in place; `variant` closes the object naming a tuple variant.
struct Array<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
    variant: bool,
}

impl<'a> Array<'a> {
    fn open(out: &'a mut Vec<u8>, variant: bool) -> Array<'a> {
        out.push(b'[');
        Array { out, first: true, variant }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        value.serialize(Writer { out: &mut *self.out })
    }

    fn close(self) -> Result<(), Error> {
        self.out.push(b']');
        if self.variant {
            self.out.push(b'}');
        }
        Ok(())
    }
}

/// The four array-like shapes, each an [`Array`]: their elements in order.
macro_rules! array_shape {
    ($($shape:ident :: $element:ident),+) => {$(
        impl ser::$shape for Array<'_> {
            type Ok = ();
            type Error = Error;
            fn $element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }
            fn end(self) -> Result<(), Error> {
                self.close()
            }
        }
    )+};
}

array_shape!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// A member's key: a field's name or a map's key.
enum Key {
    Field(&'static str),
    Map(String),
}

impl Key {
    fn as_str(&self) -> &str {
        match self {
            Key::Field(name) => name,
            Key::Map(key) => key,
        }
    }
}

/// An object: its members' values written into `values` as they come, then
/// copied into `out` in key order when it ends; `variant` closes the object
/// naming a struct variant.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    values: Vec<u8>,
    members: Vec<(Key, Range<usize>)>,
    /// A map's key waiting for its value.
    key: Option<String>,
    variant: bool,
}

impl<'a> Object<'a> {
    /// An object of about `len` members.
    fn open(out: &'a mut Vec<u8>, len: usize, variant: bool) -> Object<'a> {
        // Room for short values: most members are ids, numbers and nulls.
        let values = Vec::with_capacity(len.saturating_mul(24));
        Object { out, values, members: Vec::with_capacity(len), key: None, variant }
    }

    fn member<T: Serialize + ?Sized>(&mut self, key: Key, value: &T) -> Result<(), Error> {
        let start = self.values.len();
        value.serialize(Writer { out: &mut self.values })?;
        self.members.push((key, start..self.values.len()));
        Ok(())
    }

    fn close(mut self) -> Result<(), Error> {
        // Stable, so of members under one key the last stays last, and is kept.
        self.members.sort_by(|(a, _), (b, _)| a.as_str().cmp(b.as_str()));
        self.out.push(b'{');
        let mut first = true;
        for (index, (key, range)) in self.members.iter().enumerate() {
            if self.members.get(index + 1).is_some_and(|(next, _)| next.as_str() == key.as_str()) {
                continue;
            }
            if !first {
                self.out.push(b',');
            }
            first = false;
            scalar(self.out, key.as_str())?;
            self.out.push(b':');
            self.out.extend_from_slice(&self.values[range.clone()]);
        }
        self.out.push(b'}');
        if self.variant {
            self.out.push(b'}');
        }
        Ok(())
    }
}

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.key = Some(key.serialize(KeyWriter)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let key = self.key.take().ok_or_else(|| Error("a map's value came before its key".to_string()))?;
        self.member(Key::Map(key), value)
    }
    fn end(self) -> Result<(), Error> {
        self.close()
    }
}

/// A struct and a struct variant, each an [`Object`] keyed by field names.
macro_rules! struct_shape {
    ($($shape:ident),+) => {$(
        impl ser::$shape for Object<'_> {
            type Ok = ();
            type Error = Error;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
                self.member(Key::Field(key), value)
            }
            fn end(self) -> Result<(), Error> {
                self.close()
            }
        }
    )+};
}

struct_shape!(SerializeStruct, SerializeStructVariant);

/// A map key as the text the value tree keys it by: a string as it is, a
/// number or a boolean in decimal or as `true`/`false`, a unit variant by
/// its name. Anything else is refused (no event has such a key; the value
/// tree accepts a float key, which this writer does not need).
struct KeyWriter;

fn key_refused() -> Error {
    Error("a map key must be a string, a number, a boolean or a unit variant".to_string())
}

impl ser::Serializer for KeyWriter {
    type Ok = String;
    type Error = Error;
    type SerializeSeq = ser::Impossible<String, Error>;
    type SerializeTuple = ser::Impossible<String, Error>;
    type SerializeTupleStruct = ser::Impossible<String, Error>;
    type SerializeTupleVariant = ser::Impossible<String, Error>;
    type SerializeMap = ser::Impossible<String, Error>;
    type SerializeStruct = ser::Impossible<String, Error>;
    type SerializeStructVariant = ser::Impossible<String, Error>;

    fn serialize_bool(self, value: bool) -> Result<String, Error> {
        Ok(value.to_string())
    }
    fn serialize_i8(self, value: i8) -> Result<String, Error> {
        Ok(value.to_string())
    }
    fn serialize_i16(self, value: i16) -> Result<String, Error> {
        Ok(value.to_string())
    }
    fn serialize_i32(self, value: i32) -> Result<String, Error> {
        Ok(value.to_string())
    }
    fn serialize_i64(self, value: i64) -> Result<String, Error> {
        Ok(value.to_string())
    }
    fn serialize_u8(self, value: u8) -> Result<String, Error> {
        Ok(value.to_string())
    }
    fn serialize_u16(self, value: u16) -> Result<String, Error> {
        Ok(value.to_string())
    }
    fn serialize_u32(self, value: u32) -> Result<String, Error> {
        Ok(value.to_string())
    }
    fn serialize_u64(self, value: u64) -> Result<String, Error> {
        Ok(value.to_string())
    }
    fn serialize_f32(self, _value: f32) -> Result<String, Error> {
        Err(key_refused())
    }
    fn serialize_f64(self, _value: f64) -> Result<String, Error> {
        Err(key_refused())
    }
    fn serialize_char(self, value: char) -> Result<String, Error> {
        Ok(value.to_string())
    }
    fn serialize_str(self, value: &str) -> Result<String, Error> {
        Ok(value.to_string())
    }
    fn serialize_bytes(self, _value: &[u8]) -> Result<String, Error> {
        Err(key_refused())
    }
    fn serialize_none(self) -> Result<String, Error> {
        Err(key_refused())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<String, Error> {
        Err(key_refused())
    }
    fn serialize_unit(self) -> Result<String, Error> {
        Err(key_refused())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<String, Error> {
        Err(key_refused())
    }
    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Result<String, Error> {
        Ok(variant.to_string())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> Result<String, Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<String, Error> {
        Err(key_refused())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(key_refused())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Error> {
        Err(key_refused())
    }
    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Self::SerializeTupleStruct, Error> {
        Err(key_refused())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(key_refused())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(key_refused())
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self::SerializeStruct, Error> {
        Err(key_refused())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(key_refused())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::Serialize;

    use super::to_vec;

    /// The definition: the value tree's JSON.
    fn through_values<T: Serialize>(value: &T) -> Vec<u8> {
        serde_json::to_vec(&serde_json::to_value(value).expect("to a value")).expect("a value writes")
    }

    /// The writer's bytes and the definition's, as text.
    fn both<T: Serialize>(value: &T) -> (String, String) {
        let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("JSON is UTF-8");
        (text(to_vec(value).expect("writes")), text(through_values(value)))
    }

    #[derive(Serialize)]
    enum Shape {
        Unit,
        Newtype(Inner),
        Tuple(u8, String),
        Struct { zeta: i64, alpha: Option<String>, middle: Vec<Shape> },
    }

    #[derive(Serialize)]
    struct Inner {
        z: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u32>,
        a: (u8, char),
        #[serde(flatten)]
        extra: BTreeMap<String, u64>,
        bytes: serde_bytes_like::Bytes,
        unit: (),
        float: f64,
    }

    /// Bytes through `serialize_bytes`.
    mod serde_bytes_like {
        pub struct Bytes(pub Vec<u8>);
        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_bytes(&self.0)
            }
        }
    }

    #[derive(Serialize)]
    #[serde(tag = "type")]
    enum Tagged {
        Named { b: u8, a: u8 },
    }

    #[test]
    fn the_writer_writes_what_the_value_tree_writes() {
        let inner = || Inner {
            z: true,
            skipped: None,
            a: (7, '"'),
            // "b" sorts among the struct's own fields; "float" duplicates one.
            extra: BTreeMap::from([("b".to_string(), 1), ("zz".to_string(), 2), ("float".to_string(), 9)]),
            bytes: serde_bytes_like::Bytes(vec![0, 255]),
            unit: (),
            float: f64::NAN,
        };
        let shapes = vec![
            Shape::Unit,
            Shape::Newtype(inner()),
            Shape::Tuple(3, "t\u{1}é\u{7f}".to_string()),
            Shape::Struct {
                zeta: i64::MIN,
                alpha: None,
                middle: vec![Shape::Unit, Shape::Struct { zeta: 1, alpha: Some("x".to_string()), middle: vec![] }],
            },
        ];
        for shape in &shapes {
            let (written, defined) = both(shape);
            assert_eq!(written, defined);
        }
        let tagged = Tagged::Named { b: 2, a: 1 };
        assert_eq!(
            both(&tagged),
            (r#"{"a":1,"b":2,"type":"Named"}"#.to_string(), r#"{"a":1,"b":2,"type":"Named"}"#.to_string())
        );
        let numbers = (u64::MAX, i64::MIN, 1.5f32, 0.1f64, f64::INFINITY);
        let (written, defined) = both(&numbers);
        assert_eq!(written, defined);
        let keyed: BTreeMap<u64, bool> = BTreeMap::from([(10, true), (9, false)]);
        // Integer keys become strings, sorted as strings: "10" before "9".
        let sorted = r#"{"10":true,"9":false}"#.to_string();
        assert_eq!(both(&keyed), (sorted.clone(), sorted));
        let flags: BTreeMap<bool, u8> = BTreeMap::from([(true, 1), (false, 0)]);
        let sorted = r#"{"false":0,"true":1}"#.to_string();
        assert_eq!(both(&flags), (sorted.clone(), sorted));
        let refused: BTreeMap<(u8, u8), u8> = BTreeMap::from([((1, 2), 3)]);
        assert!(to_vec(&refused).is_err() && serde_json::to_value(&refused).is_err());
    }

    fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<u64>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<String>().prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..8)
                    .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        /// Any JSON value (any Unicode in keys and strings, any 64-bit
        /// integer, nested arrays and objects) is written as the value tree
        /// writes it.
        #[test]
        fn any_json_value_is_written_as_the_value_tree_writes_it(value in json()) {
            prop_assert_eq!(to_vec(&value).expect("writes"), through_values(&value));
        }
    }
}
