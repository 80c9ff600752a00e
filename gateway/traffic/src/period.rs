//! Budget periods: a UTC day or a UTC calendar month, as Unix seconds.
//!
//! The calendar arithmetic is Howard Hinnant's `days_from_civil`/`civil_from_days` (proleptic
//! Gregorian, exact for any date after 1970). The Redis script `redis-limit/src/tokens.lua`
//! does the same arithmetic on Redis's clock; a test there checks that both agree.

use serde::{Deserialize, Serialize};

const DAY: i64 = 86_400;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Day,
    Month,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    /// The period containing `unix_s`: `[start, end)` in Unix seconds.
    pub fn bounds(self, unix_s: i64) -> (i64, i64) {
        let days = unix_s.div_euclid(DAY);
        match self {
            Period::Day => (days * DAY, (days + 1) * DAY),
            Period::Month => {
                let (y, m, d) = civil_from_days(days);
                let start = days - (d - 1);
                (start * DAY, (start + days_in_month(y, m)) * DAY)
            }
        }
    }
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Day count since 1970-01-01 of a civil date.
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        // 2024-02-29 12:00 UTC is 1709208000.
        let t = 1_709_208_000;
        assert_eq!(civil_from_days(t / DAY), (2024, 2, 29));
        assert_eq!(Period::Day.bounds(t), (1_709_164_800, 1_709_251_200));
        // February 2024: 1706745600 (Feb 1) to 1709251200 (Mar 1), 29 days.
        assert_eq!(Period::Month.bounds(t), (1_706_745_600, 1_709_251_200));
        // December rolls into the next year: 2023-12-31 23:59:59 -> [Dec 1, Jan 1 2024).
        assert_eq!(
            Period::Month.bounds(1_704_067_199),
            (1_701_388_800, 1_704_067_200)
        );
        assert_eq!(Period::Month.bounds(1_704_067_200).0, 1_704_067_200);
        // 2100 is not a leap year.
        let feb_2100 = days_from_civil(2100, 2, 10) * DAY;
        let (s, e) = Period::Month.bounds(feb_2100);
        assert_eq!((e - s) / DAY, 28);
        assert_eq!(serde_json::to_string(&Period::Month).unwrap(), "\"month\"");
    }

    proptest! {
        #[test]
        fn bounds_contain_the_instant_and_start_on_the_first(t in 0i64..8_000_000_000) {
            let (s, e) = Period::Month.bounds(t);
            prop_assert!(s <= t && t < e);
            prop_assert_eq!(civil_from_days(s / DAY).2, 1);
            prop_assert_eq!(civil_from_days(e / DAY).2, 1);
            prop_assert!((28..=31).contains(&((e - s) / DAY)));
            let (ds, de) = Period::Day.bounds(t);
            prop_assert!(ds <= t && t < de && de - ds == DAY);
            let (y, m, d) = civil_from_days(t / DAY);
            prop_assert_eq!(days_from_civil(y, m, d), t / DAY);
        }
    }
}
