//! Quartz cron expressions, as XXL-JOB and Quartz's `CronExpression` read them, on wall-clock
//! time. The time zone and clock changes are [`crate::schedule::CronSchedule`]'s part.
//!
//! The search for the next matching time is done by the `croner` crate (seconds, `?`, `L`, `W`,
//! `LW`, `nL`, `n#k`, years, names). This module checks each field the way Quartz does (so an
//! expression Quartz refuses is refused here too, with a message naming the field), rewrites
//! what Quartz reads differently from croner, and covers what croner lacks:
//!
//! | Quartz | croner 4 | here |
//! |---|---|---|
//! | `L-n`, `L-nW` (n days before the last) | refused | croner searches every day, this module keeps the right one |
//! | wrapping ranges `FRI-MON`, `22-2` | refused | expanded to a list, as Quartz does |
//! | `L` alone in day-of-week (Saturday) | never fires | rewritten to `7` |
//! | `L`, `W`, `#` inside a list or range, `0/70` | accepted | refused, as Quartz does |
//! | both day fields given, or both `?` | accepted | refused, as Quartz does |
//!
//! Two deliberate extensions keep expressions Cadenza accepted before it read Quartz: five fields
//! (`min hour day month weekday`, second 0), and `*` in a day field where Quartz wants `?` (`*` in
//! one day field and anything in the other means the other).
//!
//! Where Quartz 2.3.2 itself is odd, this module does the plain thing instead: `nW` for a day the
//! month does not have (`31W` in April) does not fire that month (Quartz sometimes fires on the
//! 30th), and `L-n` reaching before the 1st does not fire that month.

use chrono::{Datelike, NaiveDate, NaiveDateTime, Timelike, Weekday};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// The last year a fire time may fall in (Quartz refuses later years in the year field).
pub const MAX_YEAR: i32 = 2199;
/// The first year the year field accepts.
pub const MIN_YEAR: i32 = 1970;

/// A parsed Quartz expression.
#[derive(Debug, Clone)]
pub struct QuartzCron {
    cron: Cron,
    /// `L-n` / `L-nW` in day-of-month, which croner cannot express: croner then matches every
    /// day and [`QuartzCron::next_after`] keeps this one.
    last_offset: Option<LastOffset>,
}

/// `L-n`, or `L-nW` when `weekday` (the weekday nearest to that day, within the month).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LastOffset {
    days: u32,
    weekday: bool,
}

impl LastOffset {
    /// The day of `date`'s month this picks, if the month has it.
    fn day_in(self, date: NaiveDate) -> Option<u32> {
        let last = last_day_of_month(date.year(), date.month());
        let day = last.checked_sub(self.days).filter(|d| *d >= 1)?;
        Some(if self.weekday {
            nearest_weekday(date.year(), date.month(), day)
        } else {
            day
        })
    }
}

/// The number of days in a month.
pub fn last_day_of_month(year: i32, month: u32) -> u32 {
    let (y, m) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    NaiveDate::from_ymd_opt(y, m, 1)
        .and_then(|d| d.pred_opt())
        .map_or(28, |d| d.day())
}

/// Quartz's `W`: the weekday (Monday to Friday) nearest to `day`, without leaving the month.
pub fn nearest_weekday(year: i32, month: u32, day: u32) -> u32 {
    let last = last_day_of_month(year, month);
    let Some(date) = NaiveDate::from_ymd_opt(year, month, day) else {
        return day;
    };
    match date.weekday() {
        Weekday::Sat if day == 1 => 3,
        Weekday::Sat => day - 1,
        Weekday::Sun if day == last => day - 2,
        Weekday::Sun => day + 1,
        _ => day,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
    Year,
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
/// Whole names are read too (Quartz reads the first three letters of any word).
const MONTH_NAMES: [&str; 12] = [
    "JANUARY",
    "FEBRUARY",
    "MARCH",
    "APRIL",
    "MAY",
    "JUNE",
    "JULY",
    "AUGUST",
    "SEPTEMBER",
    "OCTOBER",
    "NOVEMBER",
    "DECEMBER",
];
const DAY_NAMES: [&str; 7] = [
    "SUNDAY",
    "MONDAY",
    "TUESDAY",
    "WEDNESDAY",
    "THURSDAY",
    "FRIDAY",
    "SATURDAY",
];

impl Field {
    const ALL: [Field; 7] = [
        Field::Second,
        Field::Minute,
        Field::Hour,
        Field::DayOfMonth,
        Field::Month,
        Field::DayOfWeek,
        Field::Year,
    ];

    fn name(self) -> &'static str {
        match self {
            Field::Second => "second",
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
            Field::Year => "year",
        }
    }

    fn bounds(self) -> (u32, u32) {
        match self {
            Field::Second | Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (1, 7),
            Field::Year => (MIN_YEAR as u32, MAX_YEAR as u32),
        }
    }

    /// What the values look like, for messages.
    fn values(self) -> &'static str {
        match self {
            Field::Second | Field::Minute => "0-59",
            Field::Hour => "0-23",
            Field::DayOfMonth => "1-31",
            Field::Month => "1-12 or JAN-DEC",
            Field::DayOfWeek => "1-7 (1 = Sunday) or SUN-SAT",
            Field::Year => "1970-2199",
        }
    }

    /// Quartz's largest step (`/n`) in this field.
    fn max_step(self) -> u32 {
        match self {
            Field::Second | Field::Minute => 59,
            Field::Hour => 23,
            Field::DayOfMonth => 31,
            Field::Month => 12,
            Field::DayOfWeek => 7,
            Field::Year => MAX_YEAR as u32,
        }
    }

    /// How far a range that wraps past its end (`FRI-MON`, `22-2`) goes round.
    fn cycle(self) -> Option<u32> {
        match self {
            Field::Second | Field::Minute => Some(60),
            Field::Hour => Some(24),
            Field::DayOfMonth => Some(31),
            Field::Month => Some(12),
            Field::DayOfWeek => Some(7),
            Field::Year => None,
        }
    }

    fn names(self) -> &'static [&'static str] {
        match self {
            Field::Month => &MONTHS,
            Field::DayOfWeek => &DAYS,
            _ => &[],
        }
    }

    fn whole_names(self) -> &'static [&'static str] {
        match self {
            Field::Month => &MONTH_NAMES,
            Field::DayOfWeek => &DAY_NAMES,
            _ => &[],
        }
    }
}

/// One field's problem; [`QuartzCron::parse`] adds which field.
type FieldResult<T> = Result<T, String>;

fn value(field: Field, text: &str) -> FieldResult<u32> {
    let (lo, hi) = field.bounds();
    let named = |names: &[&str]| names.iter().position(|n| *n == text);
    let v = if let Some(i) = named(field.names()).or_else(|| named(field.whole_names())) {
        i as u32 + 1
    } else if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse::<u32>().unwrap_or(u32::MAX)
    } else {
        return Err(format!("{text:?} is not a value; use {}", field.values()));
    };
    if !(lo..=hi).contains(&v) {
        return Err(format!("{text} is out of range; use {}", field.values()));
    }
    Ok(v)
}

fn step(field: Field, text: &str) -> FieldResult<u32> {
    let n = text
        .parse::<u32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("step {text:?} is not a whole number of at least 1"))?;
    if n > field.max_step() {
        return Err(format!(
            "step {n} is larger than the field allows ({})",
            field.max_step()
        ));
    }
    Ok(n)
}

/// A plain list item (`*`, `5`, `1-5`, `*/15`, `5/15`, `1-30/2`, names) as croner reads it.
fn plain_item(field: Field, item: &str) -> FieldResult<String> {
    let (lo, hi) = field.bounds();
    let (range, stepped) = match item.split_once('/') {
        Some((r, s)) => (r, Some(step(field, s)?)),
        None => (item, None),
    };
    let (start, end) = if range == "*" {
        (lo, hi)
    } else if let Some((a, b)) = range.split_once('-') {
        (value(field, a)?, value(field, b)?)
    } else {
        let v = value(field, range)?;
        // `5/15` runs from 5 to the end of the field; `5` is 5 alone.
        (v, if stepped.is_some() { hi } else { v })
    };
    let step = stepped.unwrap_or(1);
    if range == "*" && stepped.is_none() {
        return Ok("*".to_owned());
    }
    if end >= start {
        return Ok(match (start == end, stepped) {
            (true, None) => start.to_string(),
            (_, None) => format!("{start}-{end}"),
            (_, Some(s)) => format!("{start}-{end}/{s}"),
        });
    }
    // A range that wraps (`FRI-MON`, `22-2`): Quartz goes round the field's cycle.
    let Some(cycle) = field.cycle() else {
        return Err(format!(
            "range {range} ends before it starts; years do not wrap"
        ));
    };
    let mut values = Vec::new();
    let mut i = start;
    while i <= end + cycle {
        let mut v = i % cycle;
        if v == 0 && lo == 1 {
            v = cycle;
        }
        if !values.contains(&v) {
            values.push(v);
        }
        i += step;
    }
    Ok(values
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(","))
}

fn plain_field(field: Field, text: &str) -> FieldResult<String> {
    let items = text
        .split(',')
        .map(|item| {
            if item.is_empty() {
                return Err(format!("{text:?} has an empty list item"));
            }
            if item.contains('*') && item != "*" && !item.starts_with("*/") {
                return Err(format!("{item:?}: `*` stands alone or as `*/step`"));
            }
            let mut bare = item.to_owned();
            for name in field.whole_names().iter().chain(field.names()) {
                bare = bare.replace(name, "");
            }
            if let Some(special) = bare.chars().find(|c| matches!(c, 'L' | 'W' | '#' | '?')) {
                return Err(special_misplaced(field, special, text));
            }
            plain_item(field, item)
        })
        .collect::<FieldResult<Vec<_>>>()?;
    Ok(items.join(","))
}

fn special_misplaced(field: Field, special: char, text: &str) -> String {
    match (special, field) {
        ('?', _) => "`?` is only for day-of-month or day-of-week, and stands alone".to_owned(),
        ('W', Field::DayOfMonth) => format!(
            "{text:?}: `W` applies to one day (`15W`: the weekday nearest the 15th); Quartz \
             ignores it in a list or range, so write the days without it if every day is meant"
        ),
        ('L', Field::DayOfMonth) | ('L' | '#', Field::DayOfWeek) => format!(
            "{text:?}: `{special}` cannot be combined with other values in a list or range \
             (Quartz does not support it)"
        ),
        _ => format!("`{special}` is not allowed in the {} field", field.name()),
    }
}

/// What the day-of-month field becomes.
enum DayOfMonth {
    Croner(String),
    LastOffset(LastOffset),
}

fn day_of_month(text: &str) -> FieldResult<DayOfMonth> {
    let f = Field::DayOfMonth;
    if text == "L" || text == "LW" {
        return Ok(DayOfMonth::Croner(text.to_owned()));
    }
    if let Some(rest) = text.strip_prefix("L-") {
        let (days, weekday) = match rest.strip_suffix('W') {
            Some(d) => (d, true),
            None => (rest, false),
        };
        let days = days
            .parse::<u32>()
            .ok()
            .filter(|d| *d <= 30)
            .ok_or_else(|| {
                format!("{text:?}: the offset from the last day (L-n) must be 0 to 30")
            })?;
        if days == 0 {
            return Ok(DayOfMonth::Croner(
                if weekday { "LW" } else { "L" }.to_owned(),
            ));
        }
        return Ok(DayOfMonth::LastOffset(LastOffset { days, weekday }));
    }
    if let Some(day) = text.strip_suffix('W') {
        if day.contains([',', '-', '/', '*', 'L', 'W']) {
            return Err(special_misplaced(f, 'W', text));
        }
        let d = value(f, day)?;
        return Ok(DayOfMonth::Croner(format!("{d}W")));
    }
    if text.contains('L') || text.contains('W') {
        let special = if text.contains('L') { 'L' } else { 'W' };
        return Err(special_misplaced(f, special, text));
    }
    plain_field(f, text).map(DayOfMonth::Croner)
}

fn day_of_week(text: &str) -> FieldResult<String> {
    let f = Field::DayOfWeek;
    if text == "L" {
        // Quartz: `L` alone is the last day of the week, Saturday.
        return Ok("7".to_owned());
    }
    let composite = text.contains([',', '-', '/', '*']);
    if let Some(day) = text.strip_suffix('L') {
        if composite || day.contains('#') {
            return Err(special_misplaced(f, 'L', text));
        }
        return Ok(format!("{}L", value(f, day)?));
    }
    if let Some((day, nth)) = text.split_once('#') {
        if composite || nth.contains('#') {
            return Err(special_misplaced(f, '#', text));
        }
        let n = nth
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=5).contains(n))
            .ok_or_else(|| format!("{text:?}: the number after `#` must be 1 to 5"))?;
        return Ok(format!("{}#{n}", value(f, day)?));
    }
    plain_field(f, text)
}

impl QuartzCron {
    /// Parses 6 fields (`sec min hour day-of-month month day-of-week`), 7 (with a year), or 5
    /// (`min hour day-of-month month day-of-week`, second 0). The error names the field.
    pub fn parse(expr: &str) -> Result<Self, String> {
        Self::parse_with(expr, false)
    }

    /// Reads an expression stored before Cadenza read Quartz: the same, but both day fields may
    /// be given, and a day must then match both (as they were read then), so such a job keeps
    /// firing as it did.
    pub fn parse_stored(expr: &str) -> Result<Self, String> {
        Self::parse_with(expr, true)
    }

    fn parse_with(expr: &str, both_days: bool) -> Result<Self, String> {
        let upper = expr.trim().to_ascii_uppercase();
        let mut parts: Vec<&str> = upper.split_whitespace().collect();
        match parts.len() {
            5 => parts.insert(0, "0"),
            6 | 7 => {}
            n => {
                return Err(format!(
                    "has {n} fields; expected 6 (sec min hour day-of-month month day-of-week), \
                     7 (with a year last) or 5 (min hour day-of-month month day-of-week)"
                ))
            }
        }
        let (mut dom, mut dow) = (parts[3], parts[5]);
        // Quartz wants `?` in exactly one day field; `*` there is read as `?`.
        match (dom, dow) {
            ("?", "?") => {
                return Err("`?` may be in day-of-month or day-of-week, not both".to_owned())
            }
            (_, "?") | ("?", _) => {}
            (_, "*") => dow = "?",
            ("*", _) => dom = "?",
            _ if both_days => {}
            _ => {
                return Err(format!(
                    "gives both a day-of-month ({dom}) and a day-of-week ({dow}); Quartz cannot \
                     combine them: put `?` in the one you do not mean"
                ))
            }
        }
        let mut rendered = Vec::with_capacity(7);
        let mut last_offset = None;
        for (i, field) in Field::ALL.iter().copied().enumerate() {
            let Some(text) = parts.get(i).copied() else {
                break;
            };
            let text = match field {
                Field::DayOfMonth => dom,
                Field::DayOfWeek => dow,
                _ => text,
            };
            let at = |e: String| format!("{} field {text:?}: {e}", field.name());
            let r = match field {
                Field::DayOfMonth | Field::DayOfWeek if text == "?" => "*".to_owned(),
                Field::DayOfMonth if both_days && dow != "?" => {
                    plain_field(field, text).map_err(at)?
                }
                Field::DayOfMonth => match day_of_month(text).map_err(at)? {
                    DayOfMonth::Croner(s) => s,
                    DayOfMonth::LastOffset(o) => {
                        last_offset = Some(o);
                        "*".to_owned()
                    }
                },
                Field::DayOfWeek => day_of_week(text).map_err(at)?,
                _ => plain_field(field, text).map_err(at)?,
            };
            rendered.push(r);
        }
        let rendered = rendered.join(" ");
        let cron = CronParser::builder()
            .seconds(Seconds::Required)
            .year(Year::Optional)
            .alternative_weekdays(true)
            .dom_and_dow(true)
            .build()
            .parse(&rendered)
            .map_err(|e| format!("is not valid: {e}"))?;
        Ok(Self { cron, last_offset })
    }

    /// The first matching wall-clock time strictly after `t` (fractions of a second ignored),
    /// or `None` if there is none up to the end of [`MAX_YEAR`].
    pub fn next_after(&self, t: NaiveDateTime) -> Option<NaiveDateTime> {
        let mut from = t.with_nanosecond(0)?;
        let mut inclusive = false;
        // Days croner offers that `L-n` turns down: at most one month's worth per fire in a
        // month that has the day, so this bound is only reached by one that never fires.
        for _ in 0..20_000 {
            let next = self.cron.find_next_occurrence(&from, inclusive).ok()?;
            if next.year() > MAX_YEAR {
                return None;
            }
            match self.last_offset {
                Some(o) if o.day_in(next.date()) != Some(next.day()) => {
                    // Not the day: go on from the next day's midnight, or straight to the day
                    // if it is still ahead this month.
                    let day = o.day_in(next.date()).filter(|d| *d > next.day());
                    let target = match day {
                        Some(d) => next.date().with_day(d)?,
                        None => next.date().succ_opt()?,
                    };
                    from = target.and_hms_opt(0, 0, 0)?;
                    inclusive = true;
                }
                _ => return Some(next),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wall(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap()
    }

    fn next(expr: &str, from: &str, n: usize) -> Vec<String> {
        let c = QuartzCron::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let mut t = wall(from);
        let mut out = Vec::new();
        for _ in 0..n {
            match c.next_after(t) {
                Some(x) => {
                    out.push(x.format("%Y-%m-%d %H:%M:%S").to_string());
                    t = x;
                }
                None => break,
            }
        }
        out
    }

    #[test]
    fn the_constructs_xxl_job_users_write() {
        // Last day of the month.
        assert_eq!(
            next("0 0 0 L * ?", "2026-01-15 00:00:00", 3),
            [
                "2026-01-31 00:00:00",
                "2026-02-28 00:00:00",
                "2026-03-31 00:00:00"
            ]
        );
        // Nearest weekday to the 15th: 2026-02-15 is a Sunday, 2026-03-15 too, 2026-08-15 a
        // Saturday.
        assert_eq!(
            next("0 0 10 15W * ?", "2026-02-01 00:00:00", 2),
            ["2026-02-16 10:00:00", "2026-03-16 10:00:00"]
        );
        assert_eq!(
            next("0 0 10 15W * ?", "2026-08-01 00:00:00", 1),
            ["2026-08-14 10:00:00"]
        );
        // Third Friday, last Monday, last weekday.
        assert_eq!(
            next("0 0 10 ? * 6#3", "2026-01-01 00:00:00", 2),
            ["2026-01-16 10:00:00", "2026-02-20 10:00:00"]
        );
        assert_eq!(
            next("0 0 10 ? * 2L", "2026-01-01 00:00:00", 2),
            ["2026-01-26 10:00:00", "2026-02-23 10:00:00"]
        );
        assert_eq!(
            next("0 0 8 LW * ?", "2026-05-01 00:00:00", 2),
            ["2026-05-29 08:00:00", "2026-06-30 08:00:00"]
        );
        // Three days before the last day, and the weekday nearest to it.
        assert_eq!(
            next("0 0 0 L-3 * ?", "2026-01-01 00:00:00", 3),
            [
                "2026-01-28 00:00:00",
                "2026-02-25 00:00:00",
                "2026-03-28 00:00:00"
            ]
        );
        assert_eq!(
            next("0 0 0 L-3W * ?", "2026-03-01 00:00:00", 1),
            ["2026-03-27 00:00:00"]
        );
        // `L` alone in day-of-week is Saturday.
        assert_eq!(
            next("0 0 0 ? * L", "2026-01-01 00:00:00", 1),
            ["2026-01-03 00:00:00"]
        );
        // A year field, and 29 February.
        assert_eq!(
            next("0 0 12 29 2 ? 2026-2030", "2026-01-01 00:00:00", 3),
            ["2028-02-29 12:00:00"]
        );
        // Names, and ranges that wrap.
        assert_eq!(
            next("0 0 9 ? * FRI-MON", "2026-01-01 00:00:00", 4),
            [
                "2026-01-02 09:00:00",
                "2026-01-03 09:00:00",
                "2026-01-04 09:00:00",
                "2026-01-05 09:00:00"
            ]
        );
        assert_eq!(
            next("0 0 23-1 * * ?", "2026-01-01 12:00:00", 3),
            [
                "2026-01-01 23:00:00",
                "2026-01-02 00:00:00",
                "2026-01-02 01:00:00"
            ]
        );
        assert_eq!(
            next("0 0 0 1 NOV-FEB ?", "2026-03-01 00:00:00", 4),
            [
                "2026-11-01 00:00:00",
                "2026-12-01 00:00:00",
                "2027-01-01 00:00:00",
                "2027-02-01 00:00:00"
            ]
        );
        // Steps.
        assert_eq!(
            next("0/20 * * * * ?", "2026-01-01 00:00:00", 3),
            [
                "2026-01-01 00:00:20",
                "2026-01-01 00:00:40",
                "2026-01-01 00:01:00"
            ]
        );
        assert_eq!(
            next("0 0 0 */10 * ?", "2026-01-01 00:00:00", 3),
            [
                "2026-01-11 00:00:00",
                "2026-01-21 00:00:00",
                "2026-01-31 00:00:00"
            ]
        );
    }

    #[test]
    fn expressions_cadenza_accepted_before_keep_their_meaning() {
        // Both day fields `*`, five fields, a weekday with `*` in day-of-month.
        assert_eq!(
            next("*/30 * * * * *", "2026-01-01 00:00:00", 2),
            ["2026-01-01 00:00:30", "2026-01-01 00:01:00"]
        );
        assert_eq!(
            next("*/15 * * * *", "2026-01-01 00:00:00", 1),
            ["2026-01-01 00:15:00"]
        );
        assert_eq!(
            next("0 0 9 * * MON-FRI", "2026-01-02 10:00:00", 1),
            ["2026-01-05 09:00:00"]
        );
        assert_eq!(
            next("0 0 9 1 * *", "2026-01-02 10:00:00", 1),
            ["2026-02-01 09:00:00"]
        );
    }

    #[test]
    fn quartz_refusals_name_the_field() {
        for (expr, wanted) in [
            ("* *", "has 2 fields"),
            ("0 0 0 ? * ?", "not both"),
            ("0 0 0 1 * MON", "both a day-of-month"),
            ("61 * * * * ?", "second field \"61\": 61 is out of range"),
            ("0 60 * * * ?", "minute field"),
            ("0 0 24 * * ?", "hour field"),
            ("0 0 0 32 * ?", "day-of-month field"),
            ("0 0 0 ? 13 *", "month field"),
            ("0 0 0 ? * 8", "day-of-week field"),
            ("0 0 0 ? * 0", "day-of-week field"),
            ("0 0 0 1 1 ? 1969", "year field"),
            ("0 0 0 1 1 ? 2200", "year field"),
            ("0 0 0 1 1 ? 2030-2027", "years do not wrap"),
            ("0/70 * * * * ?", "step 70"),
            ("0 0 0 ? * MON#6", "1 to 5"),
            ("0 0 0 L-31 * ?", "0 to 30"),
            ("0 0 0 1,L * ?", "cannot be combined"),
            ("0 0 0 1-15W * ?", "applies to one day"),
            ("0 0 0 ? * 2L,3", "cannot be combined"),
            ("0 0 0 ? * 2#1,6#3", "cannot be combined"),
            ("0 0 ? * * *", "`?` is only for"),
            ("0 0 L * * ?", "not allowed in the hour field"),
            ("0 0 0 ? * MONX", "not a value"),
            ("0 0 0 1,,2 * ?", "empty list item"),
            ("0 0 0 ? * 1/0", "at least 1"),
        ] {
            let e = QuartzCron::parse(expr).expect_err(expr);
            assert!(e.contains(wanted), "{expr}: {e:?} lacks {wanted:?}");
        }
    }

    #[test]
    fn stored_schedules_with_both_day_fields_keep_firing_on_days_matching_both() {
        assert!(QuartzCron::parse("0 0 9 1 * MON").is_err());
        let c = QuartzCron::parse_stored("0 0 9 1 * MON").unwrap();
        // The next 1st of a month that is a Monday.
        assert_eq!(
            c.next_after(wall("2026-01-01 00:00:00")),
            Some(wall("2026-06-01 09:00:00"))
        );
        // Stored or not, `L` and friends still cannot be mixed with a day-of-week.
        assert!(QuartzCron::parse_stored("0 0 9 L * MON").is_err());
    }

    #[test]
    fn never_fires_and_far_years_end_the_search() {
        let c = QuartzCron::parse("0 0 0 30 2 ?").unwrap();
        assert_eq!(c.next_after(wall("2026-01-01 00:00:00")), None);
        let c = QuartzCron::parse("0 0 0 L-30 2 ?").unwrap();
        assert_eq!(c.next_after(wall("2026-01-01 00:00:00")), None);
        let c = QuartzCron::parse("0 0 0 1 1 ? 2199").unwrap();
        assert_eq!(
            c.next_after(wall("2026-01-01 00:00:00")),
            Some(wall("2199-01-01 00:00:00"))
        );
        assert_eq!(c.next_after(wall("2199-01-01 00:00:00")), None);
    }
}
