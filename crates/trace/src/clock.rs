//! Wall-clock timestamps (the Azure CSV's, TraceLab's ISO-8601) as milliseconds, without a
//! date library: only the forms those traces write are read.

/// Milliseconds since 1970-01-01 of `YYYY-MM-DD[T ]HH:MM:SS[.fraction][Z|±HH:MM]`; no zone
/// means UTC (the Azure CSV gives none, and only differences are used).
pub fn parse_ms(s: &str) -> Option<f64> {
    let s = s.trim();
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac = 0.0;
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        frac = format!("0.{}", &r[..n]).parse().ok()?;
        rest = &r[n..];
    }
    let offset_min = match rest {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let z = rest[1..].replace(':', "");
            if z.len() != 4 || !z.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            sign * (z[..2].parse::<i64>().ok()? * 60 + z[2..].parse::<i64>().ok()?)
        }
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    Some((secs as f64 + frac) * 1000.0)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn azure_and_iso_timestamps_read_to_the_millisecond() {
        assert_eq!(parse_ms("1970-01-01 00:00:01.5"), Some(1500.0));
        let a = parse_ms("2023-11-16 18:15:46.6805900").unwrap();
        let b = parse_ms("2023-11-16T18:15:47.1805900Z").unwrap();
        assert!((b - a - 500.0).abs() < 1e-3, "{}", b - a);
        // 2023-11-16 is 19677 days after 1970-01-01.
        assert_eq!(
            parse_ms("2023-11-16T00:00:00Z"),
            Some(19_677.0 * 86_400_000.0)
        );
        assert_eq!(
            parse_ms("2023-11-16T01:00:00+01:00"),
            parse_ms("2023-11-16T00:00:00Z")
        );
        assert_eq!(
            parse_ms("2024-03-01T00:00:00Z").unwrap() - parse_ms("2024-02-28T00:00:00Z").unwrap(),
            2.0 * 86_400_000.0
        );
        assert_eq!(parse_ms("2023-11-16"), None);
        assert_eq!(parse_ms("2023-13-16 00:00:00"), None);
        assert_eq!(parse_ms("2023-11-16 00:00:00.x"), None);
    }
}
