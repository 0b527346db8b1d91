//! Units as people write them: context lengths (`4k` ⇄ 4096) and numbers with about four
//! significant digits. Shared by the plan, the reports and the terminal.

use crate::error::UsageError;

/// Parses one length: `4096`, `4k`/`4K` (×1024), `1m`/`1M` (×1024²).
pub fn parse_len(s: &str) -> Result<u64, UsageError> {
    let t = s.trim();
    let bad = || UsageError::BadContext(s.to_owned());
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1024u64),
        Some((i, 'm' | 'M')) => (&t[..i], 1024 * 1024),
        Some(_) => (t, 1),
        None => return Err(bad()),
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !v.is_finite() || v <= 0.0 {
        return Err(bad());
    }
    let n = (v * mult as f64).round();
    if !(1.0..=1e12).contains(&n) || (mult == 1 && num.contains('.')) {
        return Err(bad());
    }
    Ok(n as u64)
}

/// Formats a token count the way `--contexts` takes it (4096 → `4k`).
pub fn fmt_ctx(c: u64) -> String {
    if c >= 1024 && c % 1024 == 0 {
        format!("{}k", c / 1024)
    } else {
        c.to_string()
    }
}

/// A number with about four significant digits.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "–".to_owned();
    }
    if x >= 1000.0 {
        format!("{x:.0}")
    } else if x >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_round_trip_where_they_can() {
        assert_eq!(fmt_ctx(4096), "4k");
        assert_eq!(fmt_ctx(1000), "1000");
        assert_eq!(parse_len(&fmt_ctx(32 * 1024)).unwrap(), 32 * 1024);
        assert_eq!(num(1234.5), "1234");
        assert_eq!(num(12.345), "12.35");
        assert_eq!(num(f64::NAN), "–");
    }
}
