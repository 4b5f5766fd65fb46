//! The CLI's JSON output: indented like `serde_json`'s pretty printer,
//! except that an array of scalars (strings, numbers, booleans, nulls)
//! stays on one line, compact: `"instanceTypes": ["m6g.medium","t4g.medium"]`
//! (as a plan's instance type lists, made once per list, are written:
//! see `flotilla_core::instance_type_names`).
//!
//! A plan lists every instance type that can run each NodeClaim, often a
//! thousand: one line per name made a 10,000-pod plan 82 MB of mostly
//! indentation, and writing it cost more than planning it.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::{CharEscape, CompactFormatter, Formatter, Serializer};

/// Writes `value` to `out` (see the module doc).
pub fn write<W: Write, T: Serialize + ?Sized>(out: W, value: &T) -> serde_json::Result<()> {
    let mut ser = Serializer::with_formatter(out, InlineScalarArrays::default());
    value.serialize(&mut ser)
}

/// One open array or object.
#[derive(Clone, Copy, Debug)]
struct Open {
    /// For an array, whether its values are on one line (decided by its
    /// first value: a scalar); `None` until it has one. Objects: `None`.
    inline: Option<bool>,
    has_value: bool,
}

/// The formatter (see the module doc). An array value's separator is
/// written when the value's first token shows whether it is a scalar.
#[derive(Debug, Default)]
struct InlineScalarArrays {
    open: Vec<Open>,
    /// An array value is due and its separator not yet written: whether it
    /// is the array's first.
    pending: Option<bool>,
}

const INDENT: &[u8] = b"  ";

impl InlineScalarArrays {
    fn indent<W: ?Sized + Write>(&self, w: &mut W) -> io::Result<()> {
        for _ in 0..self.open.len() {
            w.write_all(INDENT)?;
        }
        Ok(())
    }

    /// Writes the separator due before an array value that starts with a
    /// scalar (`scalar`) or an array or object.
    fn value<W: ?Sized + Write>(&mut self, w: &mut W, scalar: bool) -> io::Result<()> {
        let Some(first) = self.pending.take() else {
            return Ok(());
        };
        let inline = match self.open.last_mut() {
            Some(top) => *top.inline.get_or_insert(scalar),
            None => scalar,
        };
        match (inline, first) {
            (true, true) => Ok(()),
            (true, false) => w.write_all(b","),
            (false, true) => {
                w.write_all(b"\n")?;
                self.indent(w)
            }
            (false, false) => {
                w.write_all(b",\n")?;
                self.indent(w)
            }
        }
    }

    fn begin<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        bracket: &[u8],
        array: bool,
    ) -> io::Result<()> {
        self.value(w, false)?;
        self.open.push(Open {
            inline: if array { None } else { Some(false) },
            has_value: false,
        });
        w.write_all(bracket)
    }

    fn end<W: ?Sized + Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        let closed = self.open.pop();
        if closed.is_some_and(|o| o.has_value && o.inline != Some(true)) {
            w.write_all(b"\n")?;
            self.indent(w)?;
        }
        w.write_all(bracket)
    }

    fn mark_value(&mut self) {
        if let Some(top) = self.open.last_mut() {
            top.has_value = true;
        }
    }
}

/// The scalar writers: the separator, then `CompactFormatter`'s token.
macro_rules! scalar {
    ($($name:ident($t:ty)),* $(,)?) => {$(
        fn $name<W: ?Sized + Write>(&mut self, w: &mut W, v: $t) -> io::Result<()> {
            self.value(w, true)?;
            CompactFormatter.$name(w, v)
        }
    )*};
}

impl Formatter for InlineScalarArrays {
    fn write_null<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.value(w, true)?;
        CompactFormatter.write_null(w)
    }

    scalar!(
        write_bool(bool),
        write_i8(i8),
        write_i16(i16),
        write_i32(i32),
        write_i64(i64),
        write_i128(i128),
        write_u8(u8),
        write_u16(u16),
        write_u32(u32),
        write_u64(u64),
        write_u128(u128),
        write_f32(f32),
        write_f64(f64),
        write_number_str(&str),
        write_byte_array(&[u8]),
        write_raw_fragment(&str),
    );

    fn begin_string<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.value(w, true)?;
        CompactFormatter.begin_string(w)
    }

    fn write_char_escape<W: ?Sized + Write>(&mut self, w: &mut W, e: CharEscape) -> io::Result<()> {
        CompactFormatter.write_char_escape(w, e)
    }

    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.begin(w, b"[", true)
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.end(w, b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, _w: &mut W, first: bool) -> io::Result<()> {
        self.pending = Some(first);
        Ok(())
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.mark_value();
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.begin(w, b"{", false)
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.end(w, b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        w.write_all(if first { b"\n" } else { b",\n" })?;
        self.indent(w)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.mark_value();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    fn text(v: &Value) -> String {
        let mut out = Vec::new();
        super::write(&mut out, v).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Table: value → exact text.
    #[test]
    fn scalar_arrays_stay_on_one_line_the_rest_is_indented() {
        let cases = [
            (json!([]), "[]"),
            (json!({}), "{}"),
            (json!(["a", "b"]), r#"["a","b"]"#),
            (json!([1, 2.5, null, true]), "[1,2.5,null,true]"),
            (json!({"a": 1}), "{\n  \"a\": 1\n}"),
            (
                json!({"types": ["m6g.medium", "t4g.medium"], "zones": []}),
                "{\n  \"types\": [\"m6g.medium\",\"t4g.medium\"],\n  \"zones\": []\n}",
            ),
            (
                json!([{"a": [1]}, {}]),
                "[\n  {\n    \"a\": [1]\n  },\n  {}\n]",
            ),
            (json!([[1, 2], [3]]), "[\n  [1,2],\n  [3]\n]"),
            (
                json!({"s": "quote \" and \n"}),
                "{\n  \"s\": \"quote \\\" and \\n\"\n}",
            ),
        ];
        for (value, want) in cases {
            assert_eq!(text(&value), want, "{value}");
        }
    }

    /// Whatever the value, the text parses back to it.
    #[test]
    fn round_trips() {
        let value = json!({
            "nodeClaims": [
                {"name": "default-1", "instanceTypes": ["a", "b", "c"], "pods": ["ns/p"],
                 "labels": {}, "taints": [], "price": 0.0421,
                 "resources": {"requests": {"cpu": "100m"}}},
                {"name": "default-2", "instanceTypes": [], "mixed": [1, {"x": [null]}, "s"]}
            ],
            "summary": {"pods": 3, "scheduled": 2}
        });
        let back: Value = serde_json::from_str(&text(&value)).unwrap();
        assert_eq!(back, value);
    }
}
