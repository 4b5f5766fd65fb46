//! Cron schedules of disruption budgets (`spec.disruption.budgets[].schedule`)
//! and whether a budget is active at a given time.
//!
//! The syntax is the one Karpenter accepts (it parses
//! `TZ=UTC <schedule>` with `robfig/cron`'s standard parser): five fields,
//! `minute hour day-of-month month day-of-week`, or one of the macros
//! `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`)
//! and `@hourly`. Each field is a comma-separated list of `*` (or `?` in the
//! day fields), a value, a range `a-b`, each optionally with a step
//! (`*/15`, `1-30/2`, `5/10` = `5-<max>/10`). Months may be written
//! `JAN`..`DEC` and days of the week `SUN`..`SAT`, in any case; day of
//! week `7` is Sunday, like `0`. When both day fields are restricted (neither
//! starts with `*` or `?`), a day matches if either matches (cron's OR
//! rule); otherwise both must. Times are UTC, always.
//!
//! A budget with a schedule is active from each time the schedule fires
//! (at second 0 of the minute) for its `duration`: at `now` when some firing
//! time `t` has `t <= now < t + duration` (Karpenter's `Budget.IsActive`:
//! the next firing after `now - duration` is not after `now`). Unlike
//! Karpenter, a schedule that never fires (`0 0 30 2 *`) is never active
//! (`robfig/cron` gives up and Karpenter then reads it as always active).
//!
//! Civil-time arithmetic is done here by hand (Howard Hinnant's
//! days-from-civil algorithms): no clock, no dependency.

use crate::model::Budget;

/// A parsed cron schedule (UTC, minute resolution).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronSchedule {
    /// Bit `m` set: fires at minute `m` (0..=59).
    minutes: u64,
    /// Bit `h` set: fires at hour `h` (0..=23).
    hours: u64,
    /// Bit `d` set: day of month `d` (1..=31) matches.
    days_of_month: u64,
    /// Bit `m` set: month `m` (1..=12) matches.
    months: u64,
    /// Bit `d` set: day of week `d` (0 = Sunday ..= 6) matches.
    days_of_week: u64,
    /// The day-of-month field starts with `*` or `?` (unrestricted for the
    /// OR rule).
    dom_star: bool,
    /// The day-of-week field starts with `*` or `?`.
    dow_star: bool,
}

const MONTH_NAMES: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAY_NAMES: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// Days in the Gregorian 400-year cycle: calendar and weekdays repeat after
/// it, so a schedule that fires at all fires within any such window.
const CYCLE_DAYS: i64 = 146_097;

struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    /// Names for `min`, `min + 1`, ...
    names: &'static [&'static str],
    /// `names` start at this value.
    names_from: u32,
    /// `?` is accepted as `*`.
    question: bool,
}

const FIELDS: [FieldSpec; 5] = [
    FieldSpec {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
        names_from: 0,
        question: false,
    },
    FieldSpec {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
        names_from: 0,
        question: false,
    },
    FieldSpec {
        name: "day-of-month",
        min: 1,
        max: 31,
        names: &[],
        names_from: 0,
        question: true,
    },
    FieldSpec {
        name: "month",
        min: 1,
        max: 12,
        names: MONTH_NAMES,
        names_from: 1,
        question: false,
    },
    FieldSpec {
        name: "day-of-week",
        min: 0,
        // 7 is Sunday as well; folded onto bit 0.
        max: 7,
        names: DAY_NAMES,
        names_from: 0,
        question: true,
    },
];

impl CronSchedule {
    /// Parses a 5-field cron expression or a macro; the error names the bad
    /// field.
    pub fn parse(s: &str) -> Result<CronSchedule, String> {
        let t = s.trim();
        if t.is_empty() {
            return Err("empty cron schedule".into());
        }
        let expanded;
        let text = if let Some(m) = t.strip_prefix('@') {
            expanded = match m.to_ascii_lowercase().as_str() {
                "yearly" | "annually" => "0 0 1 1 *",
                "monthly" => "0 0 1 * *",
                "weekly" => "0 0 * * 0",
                "daily" | "midnight" => "0 0 * * *",
                "hourly" => "0 * * * *",
                _ => {
                    return Err(format!(
                        "unknown cron macro {t:?} (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"
                    ))
                }
            };
            expanded
        } else {
            t
        };
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "cron schedule {t:?} has {} fields; expected 5 (minute hour day-of-month month day-of-week) or a macro such as @daily",
                fields.len()
            ));
        }
        let mut bits = [0u64; 5];
        let mut stars = [false; 5];
        for (i, (f, spec)) in fields.iter().zip(FIELDS.iter()).enumerate() {
            let (b, star) = parse_field(f, spec)
                .map_err(|e| format!("cron schedule {t:?}: {} field {f:?}: {e}", spec.name))?;
            bits[i] = b;
            stars[i] = star;
        }
        // Day of week 7 is Sunday.
        let mut dow = bits[4];
        if dow & (1 << 7) != 0 {
            dow = (dow & !(1 << 7)) | 1;
        }
        Ok(CronSchedule {
            minutes: bits[0],
            hours: bits[1],
            days_of_month: bits[2],
            months: bits[3],
            days_of_week: dow,
            dom_star: stars[2],
            dow_star: stars[4],
        })
    }

    /// Whether the schedule fires on day `days` (days since 1970-01-01).
    fn day_matches(&self, days: i64) -> bool {
        let (_, month, dom) = civil_from_days(days);
        if self.months & (1 << month) == 0 {
            return false;
        }
        let dom_match = self.days_of_month & (1 << dom) != 0;
        let dow_match = self.days_of_week & (1 << weekday(days)) != 0;
        if self.dom_star || self.dow_star {
            dom_match && dow_match
        } else {
            dom_match || dow_match
        }
    }

    /// The latest firing minute of a matching day (minute of the day), at
    /// or before `limit` when given.
    fn latest_minute(&self, limit: Option<u32>) -> Option<u32> {
        let (max_h, max_m) = match limit {
            Some(l) => (l / 60, l % 60),
            None => (23, 59),
        };
        for h in (0..=max_h).rev() {
            if self.hours & (1 << h) == 0 {
                continue;
            }
            let top = if h == max_h { max_m } else { 59 };
            let mask = if top >= 63 {
                u64::MAX
            } else {
                (1u64 << (top + 1)) - 1
            };
            let m = self.minutes & mask;
            if m != 0 {
                return Some(h * 60 + (63 - m.leading_zeros()));
            }
        }
        None
    }

    /// The latest time (Unix seconds, second 0 of a minute) at which the
    /// schedule fired at or before `now`, looking back no further than
    /// `within_secs` (and never more than one 400-year cycle). `None`: it did
    /// not fire in that window.
    pub fn previous(&self, now: i64, within_secs: u64) -> Option<i64> {
        let day = now.div_euclid(86_400);
        let minute_of_day = (now.rem_euclid(86_400) / 60) as u32;
        let back_days = i64::try_from(within_secs / 86_400)
            .unwrap_or(i64::MAX)
            .saturating_add(1)
            .min(CYCLE_DAYS + 1);
        let earliest = i128::from(now) - i128::from(within_secs);
        for back in 0..=back_days {
            let d = day.checked_sub(back)?;
            if !self.day_matches(d) {
                continue;
            }
            let limit = (back == 0).then_some(minute_of_day);
            if let Some(m) = self.latest_minute(limit) {
                let t = i128::from(d) * 86_400 + i128::from(m) * 60;
                return if t >= earliest {
                    i64::try_from(t).ok()
                } else {
                    None
                };
            }
        }
        None
    }

    /// Whether a budget with this schedule and `duration_secs` is active at
    /// `now`: the schedule fired at some `t` with `t <= now < t + duration`.
    pub fn active_at(&self, now: i64, duration_secs: u64) -> bool {
        if duration_secs == 0 {
            return false;
        }
        match self.previous(now, duration_secs) {
            Some(t) => i128::from(now) - i128::from(t) < i128::from(duration_secs),
            None => false,
        }
    }
}

/// One field: its bits and whether it is unrestricted (starts with `*`/`?`).
fn parse_field(f: &str, spec: &FieldSpec) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in f.split(',') {
        if part.is_empty() {
            return Err("empty list element".into());
        }
        let (range, step) = match part.split_once('/') {
            None => (part, None),
            Some((r, s)) => {
                if s.contains('/') {
                    return Err(format!("{part:?} has more than one step"));
                }
                let n = number(s).ok_or_else(|| format!("step {s:?} is not a number"))?;
                if n == 0 {
                    return Err(format!("step in {part:?} must be positive"));
                }
                (r, Some(n))
            }
        };
        // Open ranges end at Saturday (6), not at the Sunday alias 7.
        let open_max = if spec.max == 7 { 6 } else { spec.max };
        let (lo, hi) = if range == "*" || (spec.question && range == "?") {
            star = true;
            (spec.min, open_max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, spec)?, value(b, spec)?)
        } else {
            let v = value(range, spec)?;
            // `5/10` runs to the end of the field (robfig/cron).
            (v, if step.is_some() { open_max } else { v })
        };
        if lo > hi {
            return Err(format!(
                "beginning of range ({lo}) beyond end of range ({hi})"
            ));
        }
        let step = step.unwrap_or(1);
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v = match v.checked_add(step) {
                Some(n) => n,
                None => break,
            };
        }
    }
    Ok((bits, star))
}

fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A value of the field: a number in range or a name.
fn value(s: &str, spec: &FieldSpec) -> Result<u32, String> {
    if s.is_empty() {
        return Err("empty value in range".into());
    }
    if let Some(n) = number(s) {
        if n < spec.min || n > spec.max {
            return Err(format!("value {n} out of range {}-{}", spec.min, spec.max));
        }
        return Ok(n);
    }
    let lower = s.to_ascii_lowercase();
    match spec.names.iter().position(|n| *n == lower) {
        Some(i) => Ok(spec.names_from + i as u32),
        None if spec.names.is_empty() => Err(format!("{s:?} is not a number")),
        None => Err(format!(
            "{s:?} is neither a number nor one of {}",
            spec.names
                .iter()
                .map(|n| n.to_ascii_uppercase())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Whether `budget` is active at `now` (Unix seconds): always without a
/// schedule; from each firing of its schedule for its duration otherwise.
/// A schedule without a duration (or the reverse), or a schedule that does
/// not parse, is an error (Karpenter fails closed on it: the budget then
/// allows no disruption).
pub fn budget_active(b: &Budget, now: i64) -> Result<bool, String> {
    match (&b.schedule, b.duration_seconds) {
        (None, None) => Ok(true),
        (Some(s), Some(d)) => Ok(CronSchedule::parse(s)?.active_at(now, d)),
        (Some(_), None) => Err("budget has a schedule but no duration".into()),
        (None, Some(_)) => Err("budget has a duration but no schedule".into()),
    }
}

/// Days since 1970-01-01 of the proleptic Gregorian date `y-m-d`
/// (`m` 1..=12, `d` 1..=31).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400); // [0, 399]
    let m = i64::from(m);
    let d = i64::from(d);
    let mp = (m + 9) % 12; // March = 0
    let doy = (153 * mp + 2) / 5 + d - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * CYCLE_DAYS + doe - 719_468
}

/// The date `(year, month 1..=12, day 1..=31)` of day `z` since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(CYCLE_DAYS);
    let doe = z.rem_euclid(CYCLE_DAYS); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32; // [1, 12]
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Day of week (0 = Sunday) of day `z` since 1970-01-01 (a Thursday).
pub fn weekday(z: i64) -> u32 {
    (z + 4).rem_euclid(7) as u32
}

/// Unix seconds of `y-m-d hh:mm:ss` UTC.
pub fn unix(y: i64, m: u32, d: u32, hh: u32, mm: u32, ss: u32) -> i64 {
    days_from_civil(y, m, d) * 86_400 + i64::from(hh) * 3600 + i64::from(mm) * 60 + i64::from(ss)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::IntOrPercent;

    fn sched(s: &str) -> CronSchedule {
        match CronSchedule::parse(s) {
            Ok(c) => c,
            Err(e) => panic!("{s:?}: {e}"),
        }
    }

    fn budget(schedule: Option<&str>, duration: Option<u64>) -> Budget {
        Budget {
            nodes: IntOrPercent::Int(10),
            reasons: vec![],
            schedule: schedule.map(str::to_string),
            duration_seconds: duration,
        }
    }

    const H: u64 = 3600;

    #[test]
    fn civil_round_trips() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(unix(2024, 1, 7, 0, 0, 0), 1_704_585_600);
        assert_eq!(weekday(days_from_civil(2024, 1, 7)), 0, "a Sunday");
        assert_eq!(weekday(days_from_civil(2000, 6, 15)), 4, "a Thursday");
        for z in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z, "{y}-{m}-{d}");
        }
    }

    #[test]
    fn parse_errors_name_the_field() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("*", "has 1 fields"),
            ("* * * * ", "has 4 fields"),
            ("* * * * * *", "has 6 fields"),
            ("@wrongly", "unknown cron macro"),
            (
                "0 0 * * tue-mon",
                "beginning of range (2) beyond end of range (1)",
            ),
            ("0 0 * * tue-mon", "day-of-week field"),
            (
                "60 * * * *",
                "minute field \"60\": value 60 out of range 0-59",
            ),
            ("* 24 * * *", "hour field"),
            ("* * 0 * *", "day-of-month field"),
            ("* * 32 * *", "day-of-month field"),
            ("* * * 13 *", "month field"),
            (
                "* * * foo *",
                "month field \"foo\": \"foo\" is neither a number nor one of JAN",
            ),
            ("* * * * 8", "day-of-week field"),
            ("* * * * mon-", "empty value"),
            ("*/0 * * * *", "step in \"*/0\" must be positive"),
            ("*/x * * * *", "step \"x\" is not a number"),
            ("1/2/3 * * * *", "more than one step"),
            ("1,,2 * * * *", "empty list element"),
            ("? * * * *", "minute field"),
            ("-1 * * * *", "minute field"),
            ("99999999999 * * * *", "minute field"),
            ("TZ=UTC 0 0 * * *", "has 6 fields"),
        ];
        for (s, want) in cases {
            match CronSchedule::parse(s) {
                Ok(c) => panic!("{s:?} parsed: {c:?}"),
                Err(e) => assert!(e.contains(want), "{s:?}: {e:?} lacks {want:?}"),
            }
        }
    }

    #[test]
    fn parse_equivalences() {
        let cases: &[(&str, &str)] = &[
            ("@yearly", "0 0 1 1 *"),
            ("@annually", "0 0 1 1 *"),
            ("@monthly", "0 0 1 * *"),
            ("@weekly", "0 0 * * 0"),
            ("@daily", "0 0 * * *"),
            ("@midnight", "0 0 * * *"),
            ("@hourly", "0 * * * *"),
            ("@DAILY", "0 0 * * *"),
            ("0 0 * * 7", "0 0 * * 0"),
            ("0 0 * * SUN", "0 0 * * 0"),
            ("0 0 * * sun", "0 0 * * 0"),
            ("0 0 * * Mon-Fri", "0 0 * * 1,2,3,4,5"),
            ("0 0 * * 5-7", "0 0 * * 0,5,6"),
            ("0 0 * JAN-mar *", "0 0 * 1-3 *"),
            ("*/15 * * * *", "0,15,30,45 * * * *"),
            ("1-30/7 * * * *", "1,8,15,22,29 * * * *"),
            ("50/5 * * * *", "50,55 * * * *"),
            ("0 0 ? * *", "0 0 * * *"),
            ("  0   0 * *   *  ", "0 0 * * *"),
        ];
        for (a, b) in cases {
            assert_eq!(sched(a), sched(b), "{a:?} vs {b:?}");
        }
        assert_ne!(sched("0 0 * * 1"), sched("0 0 * * 2"));
    }

    /// `(schedule, duration, now, active)`; Karpenter's
    /// `nodepool_budgets_test.go` cases first.
    #[test]
    fn active_at() {
        // 2000-06-15 12:30:30 UTC, Karpenter's fake clock.
        let mid2000 = unix(2000, 6, 15, 12, 30, 30);
        let cases: &[(&str, u64, i64, bool)] = &[
            // "should return that a schedule is active"
            ("* * * * *", H, mid2000, true),
            // "should return that a schedule is inactive"
            ("@yearly", H, mid2000, false),
            ("@weekly", H, mid2000, false),
            // "should always consider a schedule and time in UTC": 2000-05-31
            // 00:00 at UTC+1 is 2000-05-30 23:00 UTC, 23h after midnight.
            ("@daily", 30 * 60, unix(2000, 5, 30, 23, 0, 0), false),
            // "active when the schedule hit is in the middle of the duration"
            ("@yearly", 24 * H, unix(1000, 1, 1, 12, 0, 0), true),
            // "active when the duration is longer than the recurrence"
            ("@daily", 48 * H, unix(2024, 1, 7, 0, 0, 0), true),
            // "inactive when the schedule hit is after the duration": 2024-01-07
            // is a Sunday; 06:30 is after midnight.
            ("30 6 * * SUN", 6 * H, unix(2024, 1, 7, 0, 0, 0), false),
            // Boundaries: active from the firing, up to (excluding) t + d.
            ("0 9 * * *", H, unix(2024, 3, 1, 9, 0, 0), true),
            ("0 9 * * *", H, unix(2024, 3, 1, 8, 59, 59), false),
            ("0 9 * * *", H, unix(2024, 3, 1, 9, 59, 59), true),
            ("0 9 * * *", H, unix(2024, 3, 1, 10, 0, 0), false),
            ("0 9 * * *", 0, unix(2024, 3, 1, 9, 0, 0), false),
            // Weekdays only, business hours.
            ("0 9 * * 1-5", 8 * H, unix(2024, 1, 8, 12, 0, 0), true), // Monday
            ("0 9 * * 1-5", 8 * H, unix(2024, 1, 6, 12, 0, 0), false), // Saturday
            ("0 9 * * MON-FRI", 8 * H, unix(2024, 1, 12, 16, 59, 0), true), // Friday
            // The OR rule: the 13th, or any Friday.
            ("0 0 13 * 5", 24 * H, unix(2024, 1, 13, 10, 0, 0), true), // Sat 13th
            ("0 0 13 * 5", 24 * H, unix(2024, 1, 12, 10, 0, 0), true), // Fri 12th
            ("0 0 13 * 5", 24 * H, unix(2024, 1, 14, 10, 0, 0), false), // Sun 14th
            // ... but with `*` in one day field, both must match.
            ("0 0 */1 * 5", 24 * H, unix(2024, 1, 13, 10, 0, 0), false),
            ("0 0 * * 5", 24 * H, unix(2024, 1, 12, 10, 0, 0), true),
            // Leap days: Feb 29 fires only in leap years.
            ("0 0 29 2 *", 24 * H, unix(2024, 2, 29, 23, 0, 0), true),
            ("0 0 29 2 *", 24 * H, unix(2023, 3, 1, 12, 0, 0), false),
            ("0 0 29 2 *", 366 * 24 * H, unix(2025, 2, 28, 0, 0, 0), true),
            // A schedule that never fires is never active.
            (
                "0 0 30 2 *",
                400 * 366 * 24 * H,
                unix(2024, 3, 1, 0, 0, 0),
                false,
            ),
            // Month boundary and a month restriction.
            ("0 22 31 12 *", 4 * H, unix(2025, 1, 1, 1, 0, 0), true),
            (
                "0 0 1 jan *",
                30 * 24 * H,
                unix(2025, 1, 30, 23, 59, 0),
                true,
            ),
            (
                "0 0 1 jan *",
                30 * 24 * H,
                unix(2025, 1, 31, 0, 0, 0),
                false,
            ),
            // Steps within the hour.
            ("*/15 * * * *", 5 * 60, unix(2024, 5, 5, 5, 36, 0), false),
            ("*/15 * * * *", 5 * 60, unix(2024, 5, 5, 5, 33, 0), true),
            ("*/15 * * * *", 5 * 60, unix(2024, 5, 5, 5, 49, 59), true),
            // Before 1970.
            ("@daily", H, unix(1969, 7, 20, 0, 30, 0), true),
            ("@daily", H, unix(1969, 7, 20, 1, 30, 0), false),
        ];
        for (s, d, now, want) in cases {
            assert_eq!(
                sched(s).active_at(*now, *d),
                *want,
                "{s:?} for {d}s at {now}"
            );
        }
    }

    /// The walk back agrees with a brute-force minute-by-minute search.
    #[test]
    fn previous_matches_brute_force() {
        let schedules = [
            "* * * * *",
            "0 9 * * 1-5",
            "*/7 3-5 * * *",
            "0 0 13 * 5",
            "30 6 * * SUN",
            "0 0 29 2 *",
            "15 12 1,15 * *",
            "0 0 */2 jun-aug *",
        ];
        let start = unix(2023, 12, 25, 0, 0, 0);
        let window = 9 * 24 * 3600u64;
        for s in schedules {
            let c = sched(s);
            for k in 0..60i64 {
                let now = start + k * 24_083; // irregular steps over ~17 days
                let brute = (0..=(window / 60) as i64)
                    .map(|i| (now.div_euclid(60) - i) * 60)
                    .filter(|t| now - t <= window as i64)
                    .find(|t| {
                        let (day, min) = (t.div_euclid(86_400), t.rem_euclid(86_400) / 60);
                        c.day_matches(day)
                            && c.hours & (1 << (min / 60)) != 0
                            && c.minutes & (1 << (min % 60)) != 0
                    });
                assert_eq!(c.previous(now, window), brute, "{s:?} at {now}");
            }
        }
    }

    #[test]
    fn long_durations_stay_fast_and_extremes_do_not_overflow() {
        let c = sched("0 0 30 2 *");
        let t = std::time::Instant::now();
        assert!(!c.active_at(unix(2024, 1, 1, 0, 0, 0), u64::MAX));
        assert!(!sched("@yearly").active_at(i64::MIN, u64::MAX));
        assert!(sched("* * * * *").active_at(i64::MAX, 60));
        assert!(!sched("@daily").active_at(i64::MIN + 10, 10));
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn budgets() {
        let now = unix(2000, 6, 15, 12, 30, 30);
        assert_eq!(budget_active(&budget(None, None), now), Ok(true));
        assert_eq!(
            budget_active(&budget(Some("* * * * *"), Some(H)), now),
            Ok(true)
        );
        assert_eq!(
            budget_active(&budget(Some("@yearly"), Some(H)), now),
            Ok(false)
        );
        for (b, want) in [
            (budget(Some("@wrongly"), Some(H)), "unknown cron macro"),
            (budget(Some("* * * * *"), None), "no duration"),
            (budget(None, Some(H)), "no schedule"),
        ] {
            match budget_active(&b, now) {
                Ok(v) => panic!("{b:?}: {v}"),
                Err(e) => assert!(e.contains(want), "{e}"),
            }
        }
    }
}
