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
                if e > 100 {
                    return Err(QuantityError::TooLarge(s.to_string()));
                }
                // Tiny values all round up to 1m (or stay 0).
                (10, e.max(-100))
            }
            sfx => return Err(QuantityError::Suffix(s.to_string(), sfx.to_string())),
        };
        // Mantissa as integer digits and a decimal shift.
        let (int_part, frac_part) = match num.split_once('.') {
            Some((i, f)) => (i, f),
            None => (num, ""),
        };
        let digits: String = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 30 {
            return Err(QuantityError::TooLarge(s.to_string()));
        }
        let mantissa: u128 = if digits.is_empty() {
            0
        } else {
            digits
                .parse()
                .map_err(|_| QuantityError::Syntax(s.to_string()))?
        };
        if mantissa != 0 && sign < 0 {
            return Err(QuantityError::Negative(s.to_string()));
        }
        // value_millis = mantissa * base^pow * 1000 / 10^frac_len, rounded up.
        let frac_len = frac_part.len() as i32;
        let too_large = || QuantityError::TooLarge(s.to_string());
        let mut numer: u128 = mantissa.checked_mul(1000).ok_or_else(too_large)?;
        let mut denom: u128 = 1;
        if base == 2 {
            numer = numer.checked_shl(pow as u32).ok_or_else(too_large)?;
            if pow > 0 && mantissa != 0 && numer >> pow != mantissa * 1000 {
                return Err(too_large());
            }
        } else {
            let p = pow - frac_len;
            if p >= 0 {
                numer = numer
                    .checked_mul(10u128.checked_pow(p as u32).ok_or_else(too_large)?)
                    .ok_or_else(too_large)?;
            } else {
                // Denominators beyond 10^38 round any non-zero value up to 1m.
                denom = 10u128.checked_pow((-p) as u32).unwrap_or(u128::MAX);
            }
        }
        if base == 2 && frac_len > 0 {
            denom = 10u128.pow(frac_len as u32);
        }
        let millis = numer.div_ceil(denom);
        if millis > (MAX_UNITS as u128) * 1000 {
            return Err(too_large());
        }
        Ok(Quantity(millis as i64))
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
    }
}
