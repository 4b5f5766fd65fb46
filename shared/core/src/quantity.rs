//! Kubernetes resource quantities with exact integer arithmetic.
//!
//! A [`Quantity`] is stored as a count of milli-units in an `i64`, which is
//! what the scheduler needs: CPU is never finer than `1m`, and every memory
//! value up to 8 PiB is exact. Parsing follows `k8s.io/apimachinery`'s
//! grammar (`<number><suffix>` with binary `Ki..Ei`, decimal `n u m k M G T P E`
//! or an exponent `e3`/`E-2`); values are rounded up to the next milli-unit,
//! as the API server does for CPU. Anything that does not fit, or is negative,
//! is rejected with an error rather than saturated.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use serde::{Serialize, Serializer};

/// Largest accepted quantity, in whole units (2^53, about 9e15: 8 PiB of
/// memory or 9e15 cores). Larger values are "absurd" and rejected.
pub const MAX_UNITS: i64 = 1 << 53;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error("quantity {0:?} is not a number with an optional suffix (e.g. 100m, 1.5Gi, 2e3)")]
    Syntax(String),
    #[error("quantity {0:?} has unknown suffix {1:?}")]
    Suffix(String, String),
    #[error("quantity {0:?} is negative")]
    Negative(String),
    #[error("quantity {0:?} is too large (limit is {MAX_UNITS} units)")]
    TooLarge(String),
}

/// A non-negative quantity in milli-units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity(i64);

impl Quantity {
    pub const ZERO: Quantity = Quantity(0);

    pub const fn from_millis(m: i64) -> Self {
        Quantity(m)
    }
    pub const fn from_units(u: i64) -> Self {
        Quantity(u * 1000)
    }
    pub const fn from_mib(mib: i64) -> Self {
        Quantity(mib * 1024 * 1024 * 1000)
    }
    pub const fn millis(self) -> i64 {
        self.0
    }
    /// Whole units, rounded up.
    pub const fn units_ceil(self) -> i64 {
        (self.0 + 999).div_euclid(1000)
    }
    /// Whole units, rounded down.
    pub const fn units_floor(self) -> i64 {
        self.0.div_euclid(1000)
    }
    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
    pub fn saturating_sub(self, o: Quantity) -> Quantity {
        Quantity((self.0 - o.0).max(0))
    }
    pub fn checked_add(self, o: Quantity) -> Option<Quantity> {
        self.0.checked_add(o.0).map(Quantity)
    }
    /// `self * num / den`, rounded up, for percentages of capacity.
    pub fn mul_ratio_ceil(self, num: i64, den: i64) -> Quantity {
        let v = (self.0 as i128 * num as i128 + den as i128 - 1) / den as i128;
        Quantity(v.clamp(0, i64::MAX as i128) as i64)
    }

    /// Parses a Kubernetes quantity string.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        let t = s.trim();
        if t.is_empty() {
            return Err(QuantityError::Empty);
        }
        let (sign, body) = match t.as_bytes()[0] {
            b'-' => (-1, &t[1..]),
            b'+' => (1, &t[1..]),
            _ => (1, t),
        };
        // Split number and suffix.
        let num_end = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (num, suffix) = body.split_at(num_end);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(QuantityError::Syntax(s.to_string()));
        }
        // Exponent: base 10, power.
        let (base, pow): (u32, i32) = match suffix {
            "" => (10, 0),
            "n" => (10, -9),
            "u" => (10, -6),
            "m" => (10, -3),
            "k" => (10, 3),
            "M" => (10, 6),
            "G" => (10, 9),
            "T" => (10, 12),
            "P" => (10, 15),
            "E" => (10, 18),
            "Ki" => (2, 10),
            "Mi" => (2, 20),
            "Gi" => (2, 30),
            "Ti" => (2, 40),
            "Pi" => (2, 50),
            "Ei" => (2, 60),
            sfx if sfx.starts_with('e') || sfx.starts_with('E') => {
                let e: i32 = sfx[1..]
                    .parse()
                    .map_err(|_| QuantityError::Syntax(s.to_string()))?;
                (10, e)
            }
            sfx => return Err(QuantityError::Suffix(s.to_string(), sfx.to_string())),
        };
        let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
        let mut digits: Vec<u8> = int_part
            .bytes()
            .chain(frac_part.bytes())
            .map(|b| b - b'0')
            .collect();
        if digits.iter().all(|&d| d == 0) {
            return Ok(Quantity::ZERO);
        }
        if sign < 0 {
            return Err(QuantityError::Negative(s.to_string()));
        }
        // value in millis = digits × 2^pow (binary suffix) × 10^exp10.
        let frac_len = i64::try_from(frac_part.len()).unwrap_or(i64::MAX);
        let mut exp10 = 3i64.saturating_sub(frac_len);
        if base == 2 {
            times_power_of_two(&mut digits, pow.unsigned_abs());
        } else {
            exp10 = exp10.saturating_add(i64::from(pow));
        }
        millis_ceil(&digits, exp10)
            .filter(|&m| m <= MAX_UNITS as u128 * 1000)
            .map(|m| Quantity(m as i64))
            .ok_or_else(|| QuantityError::TooLarge(s.to_string()))
    }

    /// Canonical form: `1500m`, `2`, `512Mi`, `16Gi`, `1234567`.
    pub fn to_k8s_string(self) -> String {
        let m = self.0;
        if m % 1000 != 0 {
            return format!("{m}m");
        }
        let u = m / 1000;
        if u == 0 {
            return "0".into();
        }
        for (sfx, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let b = 1i64 << shift;
            if u >= b && u % b == 0 {
                return format!("{}{sfx}", u / b);
            }
        }
        u.to_string()
    }
}

/// Multiplies a big-endian decimal digit string by `2^pow` (`pow` ≤ 60), in
/// place: exact for any length, so no quantity string can overflow.
fn times_power_of_two(digits: &mut Vec<u8>, pow: u32) {
    let factor = 1u128 << pow.min(60);
    let mut carry = 0u128;
    for d in digits.iter_mut().rev() {
        let v = u128::from(*d) * factor + carry;
        *d = (v % 10) as u8;
        carry = v / 10;
    }
    let mut head = Vec::new();
    while carry > 0 {
        head.push((carry % 10) as u8);
        carry /= 10;
    }
    head.reverse();
    digits.splice(0..0, head);
}

/// `ceil(digits × 10^exp10)`, or `None` when it needs more than 20 digits
/// (far above [`MAX_UNITS`] in millis). Digits below the point round up.
fn millis_ceil(digits: &[u8], exp10: i64) -> Option<u128> {
    let first = digits.iter().position(|&d| d != 0)?;
    let digits = &digits[first..];
    let len = i64::try_from(digits.len()).ok()?;
    let int_len = len.checked_add(exp10)?;
    if int_len > 20 {
        return None;
    }
    if int_len <= 0 {
        return Some(1);
    }
    let int_len = int_len as usize; // 1..=20
    let mut v: u128 = 0;
    for i in 0..int_len {
        v = v * 10 + u128::from(digits.get(i).copied().unwrap_or(0));
    }
    let below_point = digits
        .get(int_len..)
        .is_some_and(|r| r.iter().any(|&d| d != 0));
    Some(v + u128::from(below_point))
}

impl Add for Quantity {
    type Output = Quantity;
    fn add(self, o: Quantity) -> Quantity {
        Quantity(self.0.saturating_add(o.0))
    }
}
impl AddAssign for Quantity {
    fn add_assign(&mut self, o: Quantity) {
        self.0 = self.0.saturating_add(o.0);
    }
}
impl Sub for Quantity {
    type Output = Quantity;
    /// Saturates at zero: quantities are never negative.
    fn sub(self, o: Quantity) -> Quantity {
        self.saturating_sub(o)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_k8s_string())
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_k8s_string())
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Quantity::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> i64 {
        Quantity::parse(s).unwrap().millis()
    }

    #[test]
    fn parses_common_forms() {
        assert_eq!(q("100m"), 100);
        assert_eq!(q("1"), 1000);
        assert_eq!(q("0.5"), 500);
        assert_eq!(q("1.5Gi"), 1_610_612_736_000);
        assert_eq!(q("128Mi"), 134_217_728_000);
        assert_eq!(q("2e3"), 2_000_000);
        assert_eq!(q("1E2"), 100_000);
        assert_eq!(q("1k"), 1_000_000);
        assert_eq!(q("1M"), 1_000_000_000);
        assert_eq!(q("+3"), 3000);
        assert_eq!(q(".5"), 500);
        assert_eq!(q("0"), 0);
        assert_eq!(q("-0"), 0);
    }

    #[test]
    fn rounds_up_below_one_milli() {
        assert_eq!(q("1u"), 1);
        assert_eq!(q("100n"), 1);
        assert_eq!(q("1e-4"), 1);
        assert_eq!(q("0.0001"), 1);
        assert_eq!(q("1.0001"), 1001);
        assert_eq!(q("1e-400"), 1);
        assert_eq!(q("0.5Ki"), 512_000);
    }

    #[test]
    fn rejects_bad_and_absurd() {
        assert!(matches!(Quantity::parse(""), Err(QuantityError::Empty)));
        assert!(matches!(
            Quantity::parse("abc"),
            Err(QuantityError::Syntax(_))
        ));
        assert!(matches!(
            Quantity::parse("1..2"),
            Err(QuantityError::Syntax(_))
        ));
        assert!(matches!(
            Quantity::parse("1Gb"),
            Err(QuantityError::Suffix(..))
        ));
        assert!(matches!(
            Quantity::parse("-1"),
            Err(QuantityError::Negative(_))
        ));
        assert!(matches!(
            Quantity::parse("1e400"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            Quantity::parse("100Ei"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            Quantity::parse("99999999999999999999999999999999999999"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            Quantity::parse("1e16"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(Quantity::parse("8Pi").is_ok());
    }

    #[test]
    fn canonical_strings() {
        assert_eq!(Quantity::parse("1500m").unwrap().to_string(), "1500m");
        assert_eq!(Quantity::parse("2").unwrap().to_string(), "2");
        assert_eq!(Quantity::parse("1024Mi").unwrap().to_string(), "1Gi");
        assert_eq!(Quantity::parse("1000").unwrap().to_string(), "1000");
        assert_eq!(Quantity::ZERO.to_string(), "0");
    }

    #[test]
    fn arithmetic_saturates_at_zero() {
        let a = Quantity::from_units(1);
        let b = Quantity::from_units(2);
        assert_eq!(a - b, Quantity::ZERO);
        assert_eq!(a + b, Quantity::from_units(3));
        assert_eq!(
            Quantity::from_units(100).mul_ratio_ceil(75, 1000),
            Quantity::from_millis(7500)
        );
    }

    proptest::proptest! {
        #[test]
        fn round_trips_canonical_form(m in 0i64..(MAX_UNITS * 1000)) {
            let q = Quantity::from_millis(m);
            proptest::prop_assert_eq!(Quantity::parse(&q.to_string()).unwrap(), q);
        }

        #[test]
        fn never_panics(s in "\\PC{0,24}") {
            let _ = Quantity::parse(&s);
        }

        /// Long runs of digits, zeros and exponents, as a hostile document
        /// writes them: never a panic, and a value iff the magnitude fits.
        #[test]
        fn never_panics_on_long_numbers(
            sign in "[+-]?",
            int in "0{0,200}[0-9]{0,40}",
            frac in "(\\.0{0,200}[0-9]{0,40})?",
            sfx in "(|n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e-?[0-9]{1,12}|E[0-9]{1,3})",
        ) {
            let _ = Quantity::parse(&format!("{sign}{int}{frac}{sfx}"));
        }

        /// Exact against integer arithmetic: `m / 10^k` with a suffix, with
        /// leading and trailing zeros that carry no value.
        #[test]
        fn agrees_with_exact_arithmetic(
            m in 0u64..1_000_000_000_000,
            k in 0u32..8,
            lead in 0usize..50,
            trail in 0usize..50,
            sfx in 0usize..12,
        ) {
            let (name, num, den): (&str, u128, u128) = [
                ("", 1, 1), ("n", 1, 1_000_000_000), ("u", 1, 1_000_000), ("m", 1, 1000),
                ("k", 1000, 1), ("M", 1_000_000, 1), ("G", 1_000_000_000, 1),
                ("Ki", 1 << 10, 1), ("Mi", 1 << 20, 1), ("Gi", 1 << 30, 1),
                ("Ti", 1 << 40, 1), ("Pi", 1 << 50, 1),
            ][sfx];
            let digits = format!("{m:0>width$}", width = k as usize + 1);
            let (int, frac) = digits.split_at(digits.len() - k as usize);
            let text = format!("{}{int}.{frac}{}{name}", "0".repeat(lead), "0".repeat(trail));
            let exact_num = u128::from(m) * num * 1000;
            let exact_den = den * 10u128.pow(k);
            let millis = exact_num.div_ceil(exact_den);
            match Quantity::parse(&text) {
                Ok(q) => proptest::prop_assert_eq!(q.millis() as u128, millis, "{}", text),
                Err(e) => {
                    proptest::prop_assert!(millis > MAX_UNITS as u128 * 1000, "{text}: {e}");
                }
            }
        }
    }

    #[test]
    fn hostile_quantities_give_values_or_errors() {
        // Was a divide by zero (10^128 wrapped) and, with 39 zeros, an
        // overflow in debug builds.
        let tiny = format!("0.{}1Ki", "0".repeat(127));
        assert_eq!(q(&tiny), 1);
        let tiny39 = format!("0.{}1Ki", "0".repeat(39));
        assert_eq!(q(&tiny39), 1);
        assert_eq!(q(&format!("1.{}Ki", "0".repeat(300))), 1_024_000);
        assert_eq!(q(&format!("{}1", "0".repeat(5000))), 1000);
        assert_eq!(q(&format!("1.{}1", "0".repeat(40))), 1001);
        assert_eq!(q(&format!("0.{}1Ei", "0".repeat(60))), 1);
        assert_eq!(q("1e-2147483648"), 1);
        assert_eq!(q(&format!("0.{}1e150", "0".repeat(140))), 1_000_000_000_000);
        for bad in [
            "1e2147483647",
            "9Ei",
            "1e16",
            &format!("1{}", "0".repeat(5000)),
        ] {
            assert!(
                matches!(Quantity::parse(bad), Err(QuantityError::TooLarge(_))),
                "{bad}"
            );
        }
    }
}
