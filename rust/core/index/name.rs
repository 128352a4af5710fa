//! Index file names: the creation time as `yyyyMMddHHmmssSSS` (RocketMQ's), in UTC so that a
//! name never depends on the machine's time zone. Names sort in creation order; a reader
//! orders files by name and never parses it.

/// The name for a file created at `ms` (Unix epoch milliseconds; clamped to year 0..9999).
pub fn file_name(ms: i64) -> String {
    let ms = ms.clamp(0, 253_402_300_799_999);
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    format!("{y:04}{m:02}{d:02}{h:02}{min:02}{s:02}{milli:03}")
}

/// Whether `name` has the form of an index file name (17 ASCII digits).
pub fn is_file_name(name: &str) -> bool {
    name.len() == 17 && name.bytes().all(|b| b.is_ascii_digit())
}

/// Year, month, day of day `z` since 1970-01-01 (the proleptic Gregorian calendar).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_utc_timestamps() {
        assert_eq!(file_name(0), "19700101000000000");
        assert_eq!(file_name(1_764_169_683_123), "20251126150803123");
        assert_eq!(file_name(951_782_400_000), "20000229000000000");
        assert!(is_file_name(&file_name(1)));
        assert!(!is_file_name("2025112615080312x"));
        assert!(file_name(5) < file_name(6));
    }
}
