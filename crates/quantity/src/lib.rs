//! Kubernetes resource quantities (`500m`, `4Gi`, `1.5`, `2e3`), read as the API server reads
//! them (`ParseQuantity` in apimachinery's `pkg/api/resource/quantity.go`): hvdctl's
//! validation, its local backend and the fake cluster share this one reading, so a value
//! means the same on every backend.
//!
//! The API server's reading, kept here:
//! - `[+-]` digits, an optional `.` and digits (`5.`, `.5`; a bare sign or `.` is zero), then
//!   a suffix: binary `Ki Mi Gi Ti Pi Ei`, decimal `n u m k M G T P E` or none, or an
//!   exponent `e`/`E` with a signed whole number. Nothing else: no space, no `kb`.
//! - The value is exact, rounded up (away from zero) to a whole nano-unit, and held to
//!   ±(2⁶³−1) units.
//!
//! One difference: of the digits only the first 38 significant ones are read exactly (what
//! an `i128` holds); any further non-zero digit rounds the value up as one past the 38th.

use std::fmt;
use std::str::FromStr;

/// A quantity: its value in nano-units (10⁻⁹ of the unit: nano-CPUs, nano-bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    nanos: i128,
}

/// The largest value the API server holds, in units (larger ones are held to it).
const MAX_UNITS: i128 = i64::MAX as i128;
const NANO: i128 = 1_000_000_000;
/// Significant digits read exactly (10³⁸ < 2¹²⁷).
const MAX_DIGITS: usize = 38;

/// Why a text is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    Empty,
    /// Not the form `[+-]NUMBER[SUFFIX]` (what the API server calls "quantities must match
    /// the regular expression").
    Form,
    /// A suffix that is none of the known ones (`kb`, `GB`, `ki`).
    Suffix(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Empty => f.write_str("an empty quantity"),
            ParseError::Form => f.write_str(
                "not a quantity: a number with an optional suffix (Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an exponent like e3)",
            ),
            ParseError::Suffix(s) => write!(
                f,
                "unknown suffix `{s}` (binary Ki Mi Gi Ti Pi Ei, decimal n u m k M G T P E, or an exponent like e3)"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

impl Quantity {
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// Reads `text` as the API server does (see the module's notes).
    pub fn parse(text: &str) -> Result<Quantity, ParseError> {
        if text.is_empty() {
            return Err(ParseError::Empty);
        }
        let parts = split(text)?;
        let (bin, dec) = suffix(parts.suffix)?;
        Ok(Quantity {
            nanos: value(&parts, bin, dec),
        })
    }

    /// A whole number of units.
    pub fn from_units(units: i64) -> Quantity {
        Quantity {
            nanos: i128::from(units) * NANO,
        }
    }

    /// The value in nano-units.
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// The value in thousandths, rounded up (the API server's `MilliValue`).
    pub fn milli_value(self) -> i128 {
        ceil_div(self.nanos, 1_000_000)
    }

    /// The value in units, rounded up (the API server's `Value`): bytes for memory.
    pub fn value(self) -> i128 {
        ceil_div(self.nanos, NANO)
    }

    pub fn is_negative(self) -> bool {
        self.nanos < 0
    }

    pub fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// A whole number of units (no fraction): what extended resources and hugepages must be.
    pub fn is_whole(self) -> bool {
        self.nanos % NANO == 0
    }

    /// The sum, held to the API server's bounds.
    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: (self.nanos + other.nanos).clamp(-MAX_UNITS * NANO, MAX_UNITS * NANO),
        }
    }

    /// The difference, held to the API server's bounds.
    pub fn saturating_sub(self, other: Quantity) -> Quantity {
        self.saturating_add(Quantity {
            nanos: -other.nanos,
        })
    }

    /// `n` times this, held to the API server's bounds.
    pub fn saturating_mul(self, n: i64) -> Quantity {
        let max = MAX_UNITS * NANO;
        Quantity {
            nanos: self.nanos.checked_mul(i128::from(n)).map_or(
                if (self.nanos < 0) == (n < 0) {
                    max
                } else {
                    -max
                },
                |v| v.clamp(-max, max),
            ),
        }
    }

    /// The value as a float, for ratios and display (never for comparing quantities).
    pub fn as_f64(self) -> f64 {
        self.nanos as f64 / NANO as f64
    }
}

impl FromStr for Quantity {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Quantity, ParseError> {
        Quantity::parse(s)
    }
}

/// Formats a byte count as people write memory: `64Mi`, `2Gi` when whole, else the bytes.
pub fn format_bytes(bytes: i64) -> String {
    const MI: i64 = 1 << 20;
    if bytes != 0 && bytes % (MI << 10) == 0 {
        format!("{}Gi", bytes / (MI << 10))
    } else if bytes != 0 && bytes % MI == 0 {
        format!("{}Mi", bytes / MI)
    } else {
        bytes.to_string()
    }
}

/// `a / b` rounded toward +∞ (b > 0).
fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 { q } else { q + 1 }
}

/// A quantity's text cut into its parts, the way `parseQuantityString` cuts it.
struct Parts<'a> {
    negative: bool,
    /// Digits before the point, leading zeros dropped.
    whole: &'a str,
    /// Digits after the point.
    frac: &'a str,
    suffix: &'a str,
}

fn split(text: &str) -> Result<Parts<'_>, ParseError> {
    let b = text.as_bytes();
    let mut pos = 0;
    let negative = match b.first() {
        Some(b'-') => {
            pos = 1;
            true
        }
        Some(b'+') => {
            pos = 1;
            false
        }
        _ => false,
    };
    let digits = |from: usize| from + b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let whole_end = digits(pos);
    let whole = text[pos..whole_end].trim_start_matches('0');
    pos = whole_end;
    let mut frac = "";
    if b.get(pos) == Some(&b'.') {
        let end = digits(pos + 1);
        frac = &text[pos + 1..end];
        pos = end;
    }
    // The suffix: letters of "eEinumkKMGTP", then an optional sign and digits (an exponent's).
    let start = pos;
    pos += b[pos..]
        .iter()
        .take_while(|c| b"eEinumkKMGTP".contains(c))
        .count();
    if matches!(b.get(pos), Some(b'+' | b'-')) {
        pos += 1;
    }
    pos = digits(pos);
    if pos != b.len() {
        return Err(ParseError::Form);
    }
    Ok(Parts {
        negative,
        whole,
        frac,
        suffix: &text[start..],
    })
}

/// A suffix's power of two and power of ten (`Mi` → (20, 0), `k` → (0, 3), `e-2` → (0, −2)).
fn suffix(s: &str) -> Result<(u32, i64), ParseError> {
    let bad = || ParseError::Suffix(s.to_string());
    Ok(match s {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        e if e.len() > 1 && e.starts_with(['e', 'E']) => {
            // strconv.ParseInt(s[1:], 10, 64)
            let x: i64 = e[1..].parse().map_err(|_| bad())?;
            (0, x)
        }
        _ => return Err(bad()),
    })
}

/// The exact value of `parts` × 2^`bin` × 10^`dec`, in nano-units, rounded up (away from
/// zero) and held to ±(2⁶³−1) units.
fn value(parts: &Parts, bin: u32, dec: i64) -> i128 {
    let digits = format!("{}{}", parts.whole, parts.frac);
    let digits = digits.trim_start_matches('0');
    let mut exp = dec
        .saturating_sub(parts.frac.len() as i64)
        .saturating_add(9);
    // Past MAX_DIGITS: the rest only says whether the value is above what is kept.
    let (kept, rest) = digits.split_at(digits.len().min(MAX_DIGITS));
    let sticky = rest.bytes().any(|c| c != b'0');
    exp = exp.saturating_add(rest.len() as i64);
    let m: i128 = if kept.is_empty() {
        0
    } else {
        kept.parse().expect("at most 38 digits")
    };
    let max = MAX_UNITS * NANO;
    let magnitude = if m == 0 {
        0
    } else {
        scale(m, bin, exp, sticky).unwrap_or(max).min(max)
    };
    if parts.negative {
        -magnitude
    } else {
        magnitude
    }
}

/// ⌈(m + s) × 2^bin × 10^exp⌉ for m > 0, s in [0, 1) non-zero when `sticky`; `None` when
/// it is beyond what an i128 holds (far past the cap).
fn scale(m: i128, bin: u32, exp: i64, sticky: bool) -> Option<i128> {
    let shifted = |m: i128| m.checked_mul(1i128.checked_shl(bin)?);
    if exp >= 0 {
        if sticky {
            // Kept 38 digits with more behind and no fraction: at least 10³⁷, past the cap.
            return None;
        }
        let p = 10i128.checked_pow(u32::try_from(exp).ok()?)?;
        return shifted(m)?.checked_mul(p);
    }
    let k = u32::try_from(exp.unsigned_abs()).ok().filter(|k| *k <= 38);
    let Some(k) = k else {
        // Below one nano-unit, and above zero: rounds up to one.
        return Some(1);
    };
    let d = 10i128.pow(k);
    match shifted(m) {
        Some(v) => Some(v / d + i128::from(v % d != 0 || sticky)),
        // Only with a binary suffix and over 20 significant digits past nine decimals:
        // divide first (the value is far above a nano-unit; its last digit may be off).
        None => {
            let q = m / d + i128::from(m % d != 0 || sticky);
            shifted(q)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> i128 {
        Quantity::parse(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .nanos()
    }

    #[test]
    fn the_forms_the_api_server_reads() {
        assert_eq!(n("1"), NANO);
        assert_eq!(n("500m"), NANO / 2);
        assert_eq!(n("1.5"), 3 * NANO / 2);
        assert_eq!(n(".5"), NANO / 2);
        assert_eq!(n("5."), 5 * NANO);
        assert_eq!(n("1.G"), NANO * NANO);
        assert_eq!(n("4Gi"), 4 * (1 << 30) * NANO);
        assert_eq!(n("1.5Ki"), 1536 * NANO);
        assert_eq!(n("2e3"), 2000 * NANO);
        assert_eq!(n("1E-3"), NANO / 1000);
        assert_eq!(n("1e+3"), 1000 * NANO);
        assert_eq!(n("+1"), NANO);
        assert_eq!(n("-1"), -NANO);
        assert_eq!(n("100n"), 100);
        assert_eq!(n("3u"), 3000);
        assert_eq!(n("0"), 0);
        assert_eq!(n("000"), 0);
        // A bare sign or point is zero to the API server (parseQuantityString).
        assert_eq!(n("+"), 0);
        assert_eq!(n("."), 0);
    }

    #[test]
    fn what_it_refuses() {
        for bad in [
            "", "1 Gi", " 1", "1Gb", "4GB", "abc", "1.2.3", "1e", "ki", "1ki", "1e1.5", "1Ki2",
            "--1", "1kb", "1e3Ki",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?}");
        }
        // As the API server: a letter outside the suffixes' is the form's fault (ErrFormatWrong),
        // suffix letters that make no suffix are the suffix's (ErrSuffix).
        assert_eq!(Quantity::parse("4GB"), Err(ParseError::Form));
        assert_eq!(Quantity::parse("1ki"), Err(ParseError::Suffix("ki".into())));
    }

    #[test]
    fn rounding_up_to_a_nano_and_the_cap() {
        assert_eq!(n("0.1n"), 1);
        assert_eq!(n("1.0000000001"), NANO + 1);
        assert_eq!(n("-0.1n"), -1);
        assert_eq!(n("1e-30"), 1);
        let max = MAX_UNITS * NANO;
        assert_eq!(n("9223372036854775807"), max);
        assert_eq!(n("9223372036854775808"), max);
        assert_eq!(n("16Ei"), max);
        assert_eq!(n("1e100"), max);
        assert_eq!(n("-1e100"), -max);
        assert_eq!(n(&format!("1{}", "0".repeat(60))), max);
        // 40 significant digits after the point: the 39th and 40th round up.
        assert_eq!(n(&format!("0.{}1", "0".repeat(39))), 1);
    }

    #[test]
    fn milli_and_units_round_up() {
        let q = |s| Quantity::parse(s).unwrap();
        assert_eq!(q("1.0001").milli_value(), 1001);
        assert_eq!(q("500m").milli_value(), 500);
        assert_eq!(q("1.5").value(), 2);
        assert_eq!(q("1Ki").value(), 1024);
        assert_eq!(q("1e3").value(), 1000);
        assert!(q("2").is_whole() && !q("1500m").is_whole());
        assert!(q("1Gi") > q("1G") && q("1000M") == q("1G") && q("1000m") == q("1"));
        assert_eq!(format_bytes(64 << 20), "64Mi");
        assert_eq!(format_bytes(2 << 30), "2Gi");
        assert_eq!(format_bytes(1000), "1000");
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            /// Every form of a whole number of bytes means that number.
            #[test]
            fn the_forms_of_one_value_agree(k in 0i64..1_000_000) {
                let q = |s: String| Quantity::parse(&s).unwrap();
                let units = Quantity::from_units(k * 1024);
                prop_assert_eq!(q(format!("{k}Ki")), units);
                prop_assert_eq!(q(format!("{}", k * 1024)), units);
                prop_assert_eq!(q(format!("{}e0", k * 1024)), units);
                let thousands = q(format!("{}k", k * 1024 / 1000)).value();
                prop_assert!(thousands <= i128::from(k * 1024));
                prop_assert_eq!(q(format!("{}m", i128::from(k) * 1024 * 1000)), units);
            }

            /// Nothing panics, and what is read is within the API server's bounds.
            #[test]
            fn any_text_is_read_or_refused(s in "[-+]?[0-9]{0,45}(\\.[0-9]{0,45})?([eE][-+]?[0-9]{1,4}|[numkMGTPE]|[KMGTPE]i)?") {
                if let Ok(q) = Quantity::parse(&s) {
                    prop_assert!(q.nanos().abs() <= MAX_UNITS * NANO);
                }
            }
        }
    }
}
