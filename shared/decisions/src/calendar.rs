//! Calendar arithmetic for schedules and maintenance windows, free of I/O:
//! when a schedule fires next (an interval, a 5-field cron expression in an
//! IANA time zone, or one time), and which maintenance window contains an
//! instant or opens next. Times are epoch milliseconds, as the lifecycle
//! keeps them.
//!
//! Cron follows the classic (Vixie) reading: `minute hour day-of-month
//! month day-of-week`, each field `*`, a number, a range `a-b`, a step
//! (`*/n`, `a-b/n`, `a/n`) or a comma list of those; months and weekdays
//! also by three-letter name; weekday 0 and 7 are Sunday; when both
//! day-of-month and day-of-week are restricted, a day matching either
//! fires. Local times are read in the time zone: a time a daylight-saving
//! change skips fires at the same distance after the change (02:30 in a
//! spring-forward gap fires at 03:30), a time it repeats fires once, at the
//! first of the two.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;

/// How many days ahead a cron expression is searched for its next time
/// (eight years: every expression that fires at all fires in that span;
/// 29 February with a weekday restriction is the rarest).
const MAX_DAYS_AHEAD: i64 = 8 * 366;

/// The longest maintenance window (a week).
pub const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// The shortest interval a schedule may repeat at.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Why a calendar specification cannot be used; each names its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    /// A cron expression is malformed.
    #[error("cron {expression:?}: {problem}")]
    Cron {
        /// The expression as given.
        expression: String,
        /// What is wrong, naming the field.
        problem: String,
    },
    /// A time zone name is not in the IANA database.
    #[error("timezone {0:?}: not an IANA time zone name (such as Europe/Berlin or UTC)")]
    TimeZone(String),
    /// An interval is not a positive duration of at least a second.
    #[error("interval {0:?}: use a Go duration of at least 1s, such as 24h or 90m")]
    Interval(String),
    /// A window's duration is out of range.
    #[error("window duration {0:?}: use a Go duration from 1m to 168h, such as 4h")]
    WindowDuration(String),
    /// A time could not be represented.
    #[error("time {0} is out of range")]
    OutOfRange(i64),
    /// None of a schedule's maintenance windows opens again.
    #[error("none of its maintenance windows opens again")]
    NoWindow,
}

/// A time zone by IANA name (`UTC` when empty).
pub fn time_zone(name: &str) -> Result<TimeZone, CalendarError> {
    if name.is_empty() {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|_| CalendarError::TimeZone(name.to_owned()))
}

fn timestamp(ms: i64) -> Result<Timestamp, CalendarError> {
    Timestamp::from_millisecond(ms).map_err(|_| CalendarError::OutOfRange(ms))
}

/// One field of a cron expression: which values it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    bits: u64,
    /// `*` (or `*/1`): restricts nothing (matters for the day rule).
    any: bool,
}

impl Field {
    fn has(self, v: i8) -> bool {
        v >= 0 && self.bits & (1 << v) != 0
    }

    fn values(self, lo: i8, hi: i8) -> impl Iterator<Item = i8> {
        (lo..=hi).filter(move |v| self.has(*v))
    }
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn parse_field(
    name: &str,
    text: &str,
    lo: i8,
    hi: i8,
    names: &[&str],
    name_base: i8,
) -> Result<Field, String> {
    let value = |t: &str| -> Result<i8, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(t)) {
            return Ok(name_base + i8::try_from(i).unwrap_or(0));
        }
        let v: i8 = t
            .parse()
            .map_err(|_| format!("{name}: {t:?} is not a number from {lo} to {hi}"))?;
        if v < lo || v > hi {
            return Err(format!("{name}: {v} is outside {lo}-{hi}"));
        }
        Ok(v)
    };
    let mut field = Field {
        bits: 0,
        any: false,
    };
    for part in text.split(',') {
        if part.is_empty() {
            return Err(format!("{name}: an empty item in {text:?}"));
        }
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let s: i8 = s
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("{name}: step {s:?} is not a positive number"))?;
                (r, s)
            }
            None => (part, 1),
        };
        let (from, to) = if range == "*" {
            if step == 1 {
                field.any = true;
            }
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(a)?, value(b)?);
            if a > b {
                return Err(format!("{name}: range {range:?} runs backwards"));
            }
            (a, b)
        } else {
            let a = value(range)?;
            // `a/n` means from a to the end, stepping n.
            (a, if part.contains('/') { hi } else { a })
        };
        let mut v = from;
        while v <= to {
            field.bits |= 1 << v;
            v = match v.checked_add(step) {
                Some(n) => n,
                None => break,
            };
        }
    }
    Ok(field)
}

/// A parsed 5-field cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    text: String,
    minutes: Field,
    hours: Field,
    days: Field,
    months: Field,
    weekdays: Field,
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Cron {
    /// Parses `minute hour day-of-month month day-of-week`. Refuses an
    /// expression that can never fire (30 February).
    pub fn parse(text: &str) -> Result<Cron, CalendarError> {
        let error = |problem: String| CalendarError::Cron {
            expression: text.to_owned(),
            problem,
        };
        let fields: Vec<&str> = text.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields.as_slice() else {
            return Err(error(format!(
                "has {} fields; use 5: minute hour day-of-month month day-of-week",
                fields.len()
            )));
        };
        let mut weekdays =
            parse_field("day-of-week", weekday, 0, 7, &WEEKDAYS, 0).map_err(error)?;
        if weekdays.has(7) {
            weekdays.bits = (weekdays.bits | 1) & !(1 << 7);
        }
        let cron = Cron {
            text: fields.join(" "),
            minutes: parse_field("minute", minute, 0, 59, &[], 0).map_err(error)?,
            hours: parse_field("hour", hour, 0, 23, &[], 0).map_err(error)?,
            days: parse_field("day-of-month", day, 1, 31, &[], 0).map_err(error)?,
            months: parse_field("month", month, 1, 12, &MONTHS, 1).map_err(error)?,
            weekdays,
        };
        // A day-of-month restriction alone that no month it names has.
        if !cron.days.any && cron.weekdays.any {
            let longest = |m: i8| match m {
                2 => 29,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            let possible = cron
                .months
                .values(1, 12)
                .any(|m| cron.days.values(1, longest(m)).next().is_some());
            if !possible {
                return Err(error(
                    "no month it names has the day it names: it would never fire".to_owned(),
                ));
            }
        }
        Ok(cron)
    }

    fn matches_day(&self, date: Date) -> bool {
        if !self.months.has(date.month()) {
            return false;
        }
        let day = self.days.has(date.day());
        let weekday = self.weekdays.has(date.weekday().to_sunday_zero_offset());
        match (self.days.any, self.weekdays.any) {
            (false, false) => day || weekday,
            _ => day && weekday,
        }
    }

    /// The first time after `after_ms` (strictly) that the expression
    /// names, read in `tz`; `None` when there is none within eight years.
    pub fn next_after(&self, after_ms: i64, tz: &TimeZone) -> Result<Option<i64>, CalendarError> {
        let after = timestamp(after_ms)?;
        let mut date = after.to_zoned(tz.clone()).date();
        for _ in 0..MAX_DAYS_AHEAD {
            if self.matches_day(date) {
                let mut first: Option<Timestamp> = None;
                for hour in self.hours.values(0, 23) {
                    for minute in self.minutes.values(0, 59) {
                        let local = date.at(hour, minute, 0, 0);
                        let Some(t) = resolve(tz, local) else {
                            continue;
                        };
                        if t > after && first.is_none_or(|f| t < f) {
                            first = Some(t);
                        }
                    }
                }
                if let Some(t) = first {
                    return Ok(Some(t.as_millisecond()));
                }
            }
            date = match date.tomorrow() {
                Ok(d) => d,
                Err(_) => return Ok(None),
            };
        }
        Ok(None)
    }
}

/// A local time in `tz` as an instant: a skipped time moves forward by the
/// gap, a repeated one is its first occurrence.
fn resolve(tz: &TimeZone, local: DateTime) -> Option<Timestamp> {
    tz.to_ambiguous_timestamp(local).compatible().ok()
}

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recurrence {
    /// Every so often, counted from the schedule's creation (or resume).
    Interval(Duration),
    /// At the times a cron expression names, in a time zone.
    Cron(Cron),
    /// Once, at this time (epoch ms).
    Once(i64),
}

impl Recurrence {
    /// An interval from Go duration text (at least [`MIN_INTERVAL`]).
    pub fn interval(text: &str) -> Result<Recurrence, CalendarError> {
        flow_rules::duration::parse_go(text)
            .ok()
            .and_then(|d| d.non_negative())
            .filter(|d| *d >= MIN_INTERVAL)
            .map(Recurrence::Interval)
            .ok_or_else(|| CalendarError::Interval(text.to_owned()))
    }

    /// The first firing of a schedule created (or resumed) at `from_ms`: an
    /// interval after it, the cron's next time after it, or the one time
    /// (even when past: it is due at once).
    pub fn first(&self, from_ms: i64, tz: &TimeZone) -> Result<Option<i64>, CalendarError> {
        match self {
            Recurrence::Interval(every) => Ok(Some(from_ms.saturating_add(ms(*every)))),
            Recurrence::Cron(cron) => cron.next_after(from_ms, tz),
            Recurrence::Once(at) => Ok(Some(*at)),
        }
    }

    /// The next firing after one due at `due_ms` fired at `now_ms`.
    ///
    /// Missed firings are not replayed: a schedule whose scheduler was down
    /// across several of its times fires once when one comes back (that
    /// firing is the one due at `due_ms`), and its next time is the first
    /// one after `now_ms` — for an interval, on the schedule's own beat
    /// (`due + k × interval`), so it does not drift.
    pub fn after_firing(
        &self,
        due_ms: i64,
        now_ms: i64,
        tz: &TimeZone,
    ) -> Result<Option<i64>, CalendarError> {
        match self {
            Recurrence::Interval(every) => {
                let every = ms(*every).max(1);
                let behind = now_ms.saturating_sub(due_ms).max(0);
                let steps = behind / every + 1;
                Ok(Some(due_ms.saturating_add(steps.saturating_mul(every))))
            }
            Recurrence::Cron(cron) => cron.next_after(due_ms.max(now_ms), tz),
            Recurrence::Once(_) => Ok(None),
        }
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A maintenance window: it opens at the times a cron expression names, in
/// its time zone, and stays open for a duration.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowRule {
    /// When it opens.
    pub opens: Cron,
    /// How long it stays open.
    pub duration: Duration,
    /// The zone `opens` is read in.
    pub tz: TimeZone,
}

impl WindowRule {
    /// A window from its parts (the duration as Go text, 1 min to a week).
    pub fn parse(cron: &str, duration: &str, tz: &str) -> Result<WindowRule, CalendarError> {
        let opens = Cron::parse(cron)?;
        let duration = flow_rules::duration::parse_go(duration)
            .ok()
            .and_then(|d| d.non_negative())
            .filter(|d| *d >= Duration::from_secs(60) && *d <= MAX_WINDOW)
            .ok_or_else(|| CalendarError::WindowDuration(duration.to_owned()))?;
        Ok(WindowRule {
            opens,
            duration,
            tz: time_zone(tz)?,
        })
    }

    /// The opening of this window that contains `t_ms`, or else the next
    /// one (openings that overlap are one opening).
    fn around(&self, t_ms: i64) -> Result<Option<Opening>, CalendarError> {
        let length = ms(self.duration);
        let Some(start) = self.opens.next_after(t_ms - length, &self.tz)? else {
            return Ok(None);
        };
        let mut end = start + length;
        // Later openings that begin before this one ends extend it.
        let mut from = start;
        for _ in 0..1000 {
            match self.opens.next_after(from, &self.tz)? {
                Some(next) if next < end => {
                    end = end.max(next + length);
                    from = next;
                }
                _ => break,
            }
        }
        Ok(Some(Opening {
            start_ms: start,
            end_ms: end,
        }))
    }
}

/// One opening of a maintenance window: from its start (inclusive) to its
/// end (exclusive), epoch ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opening {
    /// When it opens.
    pub start_ms: i64,
    /// When it closes.
    pub end_ms: i64,
}

impl Opening {
    /// Whether `t_ms` is inside.
    pub fn contains(&self, t_ms: i64) -> bool {
        self.start_ms <= t_ms && t_ms < self.end_ms
    }
}

/// The window opening that contains `t_ms` (of several windows, the one
/// that stays open longest), or else the one that opens first after it;
/// `None` when no window ever opens again.
pub fn window_at(windows: &[WindowRule], t_ms: i64) -> Result<Option<Opening>, CalendarError> {
    let mut open: Option<Opening> = None;
    let mut next: Option<Opening> = None;
    for w in windows {
        let Some(o) = w.around(t_ms)? else { continue };
        if o.contains(t_ms) {
            if open.is_none_or(|b| o.end_ms > b.end_ms) {
                open = Some(o);
            }
        } else if next.is_none_or(|b| o.start_ms < b.start_ms) {
            next = Some(o);
        }
    }
    Ok(open.or(next))
}

/// Maintenance windows from their wire form (each in its own zone, else
/// `timezone`); every problem is named `windows[i]: …`.
pub fn window_rules(
    windows: &[flow_protocol::schedule::MaintenanceWindow],
    timezone: &str,
) -> Result<Vec<WindowRule>, Vec<String>> {
    let mut rules = Vec::new();
    let mut problems = Vec::new();
    for (i, w) in windows.iter().enumerate() {
        let zone = if w.timezone.is_empty() {
            timezone
        } else {
            &w.timezone
        };
        match WindowRule::parse(&w.cron, &w.duration, zone) {
            Ok(r) => rules.push(r),
            Err(e) => problems.push(format!("windows[{i}]: {e}")),
        }
    }
    if problems.is_empty() {
        Ok(rules)
    } else {
        Err(problems)
    }
}

/// A schedule's calendar: when it fires and the windows its tasks may
/// start in, read from its wire form with every problem named.
#[derive(Debug, Clone)]
pub struct ScheduleCalendar {
    /// When it fires.
    pub recurrence: Recurrence,
    /// The zone its cron times are read in.
    pub tz: TimeZone,
    /// Its maintenance windows (none: any time).
    pub windows: Vec<WindowRule>,
}

impl ScheduleCalendar {
    /// Reads a schedule's spec, time zone and windows; every problem is
    /// reported, each naming its field.
    pub fn new(
        spec: &flow_protocol::schedule::ScheduleSpec,
        timezone: &str,
        windows: &[flow_protocol::schedule::MaintenanceWindow],
    ) -> Result<ScheduleCalendar, Vec<String>> {
        use flow_protocol::schedule::ScheduleSpec;
        let mut problems = Vec::new();
        let tz = time_zone(timezone)
            .map_err(|e| problems.push(e.to_string()))
            .ok();
        let recurrence = match spec {
            ScheduleSpec::Interval { every } => Recurrence::interval(every),
            ScheduleSpec::Cron { expression } => Cron::parse(expression).map(Recurrence::Cron),
            ScheduleSpec::Once { at } => Ok(Recurrence::Once(
                i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX),
            )),
        }
        .map_err(|e| problems.push(format!("spec: {e}")))
        .ok();
        let rules = match window_rules(windows, timezone) {
            Ok(r) => r,
            Err(more) => {
                problems.extend(more);
                Vec::new()
            }
        };
        match (recurrence, tz) {
            (Some(recurrence), Some(tz)) if problems.is_empty() => Ok(ScheduleCalendar {
                recurrence,
                tz,
                windows: rules,
            }),
            _ => Err(problems),
        }
    }

    /// `at_ms` in the schedule's zone (`2026-12-07T02:00:00+01:00[Europe/Berlin]`).
    pub fn local(&self, at_ms: i64) -> String {
        Timestamp::from_millisecond(at_ms)
            .map(|t| t.to_zoned(self.tz.clone()).to_string())
            .unwrap_or_else(|_| at_ms.to_string())
    }

    /// The first firing of a schedule created or resumed at `from_ms`.
    pub fn first(&self, from_ms: i64) -> Result<Option<i64>, CalendarError> {
        self.recurrence.first(from_ms, &self.tz)
    }

    /// A firing due at `due_ms` made at `now_ms`: the schedule's next time
    /// ([`Recurrence::after_firing`]) and the window its tasks get.
    pub fn firing(&self, due_ms: i64, now_ms: i64) -> Result<Firing, CalendarError> {
        Ok(Firing {
            next_ms: self.recurrence.after_firing(due_ms, now_ms, &self.tz)?,
            window: self.window(now_ms)?,
        })
    }

    /// The window tasks submitted at `now_ms` get: the open one, or the
    /// next; `Ok(None)` without windows. A schedule whose windows never
    /// open again is an error.
    pub fn window(&self, now_ms: i64) -> Result<Option<Opening>, CalendarError> {
        if self.windows.is_empty() {
            return Ok(None);
        }
        match window_at(&self.windows, now_ms)? {
            Some(o) => Ok(Some(o)),
            None => Err(CalendarError::NoWindow),
        }
    }
}

/// What a firing decides: the schedule's next time and its tasks' window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Firing {
    /// The next time (none: a one-time schedule, done).
    pub next_ms: Option<i64>,
    /// The window of this firing's tasks (none: the schedule has none).
    pub window: Option<Opening>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().as_millisecond()
    }

    fn show(ms: i64) -> String {
        Timestamp::from_millisecond(ms).unwrap().to_string()
    }

    fn next(expr: &str, after: &str, tz: &str) -> String {
        let cron = Cron::parse(expr).unwrap();
        show(
            cron.next_after(at(after), &time_zone(tz).unwrap())
                .unwrap()
                .unwrap(),
        )
    }

    #[test]
    fn cron_fields() {
        assert_eq!(
            next("0 2 * * 1", "2026-12-01T00:00:00Z", "UTC"),
            "2026-12-07T02:00:00Z"
        );
        assert_eq!(
            next("*/15 * * * *", "2026-12-01T10:07:00Z", "UTC"),
            "2026-12-01T10:15:00Z"
        );
        assert_eq!(
            next("30 9-17/4 * * mon-fri", "2026-12-05T00:00:00Z", "UTC"),
            "2026-12-07T09:30:00Z"
        );
        assert_eq!(
            next("0 0 1 jan,jul *", "2026-12-01T00:00:00Z", "UTC"),
            "2027-01-01T00:00:00Z"
        );
        // Weekday 7 is Sunday.
        assert_eq!(
            next("0 12 * * 7", "2026-12-01T00:00:00Z", "UTC"),
            "2026-12-06T12:00:00Z"
        );
        // Strictly after.
        assert_eq!(
            next("0 2 * * *", "2026-12-01T02:00:00Z", "UTC"),
            "2026-12-02T02:00:00Z"
        );
    }

    #[test]
    fn day_of_month_or_weekday() {
        // The 15th, or any Friday: 2026-12-04 is a Friday.
        assert_eq!(
            next("0 0 15 * fri", "2026-12-01T00:00:00Z", "UTC"),
            "2026-12-04T00:00:00Z"
        );
        assert_eq!(
            next("0 0 29 2 *", "2026-01-01T00:00:00Z", "UTC"),
            "2028-02-29T00:00:00Z"
        );
    }

    #[test]
    fn cron_in_a_time_zone() {
        // 02:00 in Berlin is 01:00 UTC in winter, 00:00 UTC in summer.
        assert_eq!(
            next("0 2 * * *", "2026-12-01T12:00:00Z", "Europe/Berlin"),
            "2026-12-02T01:00:00Z"
        );
        assert_eq!(
            next("0 2 * * *", "2026-07-01T12:00:00Z", "Europe/Berlin"),
            "2026-07-02T00:00:00Z"
        );
        assert_eq!(
            next("0 9 * * *", "2026-12-01T20:00:00Z", "America/New_York"),
            "2026-12-02T14:00:00Z"
        );
    }

    #[test]
    fn daylight_saving_gaps_and_folds() {
        // Berlin springs forward 2027-03-28 02:00 → 03:00: 02:30 does not
        // exist that day and fires at 03:30 local (01:30 UTC).
        assert_eq!(
            next("30 2 * * *", "2027-03-27T12:00:00Z", "Europe/Berlin"),
            "2027-03-28T01:30:00Z"
        );
        // Falls back 2026-10-25 03:00 → 02:00: 02:30 happens twice and
        // fires once, at the first (00:30 UTC), then the next day.
        let first = next("30 2 * * *", "2026-10-24T12:00:00Z", "Europe/Berlin");
        assert_eq!(first, "2026-10-25T00:30:00Z");
        assert_eq!(
            next("30 2 * * *", &first, "Europe/Berlin"),
            "2026-10-26T01:30:00Z"
        );
    }

    #[test]
    fn bad_cron_names_the_field() {
        for (expr, word) in [
            ("0 2 * *", "use 5"),
            ("61 * * * *", "minute"),
            ("* 24 * * *", "hour"),
            ("* * 0 * *", "day-of-month"),
            ("* * * 13 *", "month"),
            ("* * * * 8", "day-of-week"),
            ("*/0 * * * *", "step"),
            ("5-1 * * * *", "backwards"),
            ("0 0 30 2 *", "never fire"),
            ("0 0 * foo *", "month"),
            ("0,,1 * * * *", "empty"),
        ] {
            let e = Cron::parse(expr).unwrap_err().to_string();
            assert!(e.contains(word), "{expr}: {e}");
        }
        assert!(time_zone("Mars/Olympus").is_err());
        assert_eq!(time_zone("").unwrap(), TimeZone::UTC);
    }

    #[test]
    fn intervals_keep_their_beat_and_coalesce_missed_firings() {
        let every = Recurrence::interval("1h").unwrap();
        let tz = TimeZone::UTC;
        let t0 = at("2026-12-01T00:00:00Z");
        assert_eq!(
            every.first(t0, &tz).unwrap(),
            Some(at("2026-12-01T01:00:00Z"))
        );
        // On time: the next is one interval later.
        let due = at("2026-12-01T01:00:00Z");
        assert_eq!(
            every.after_firing(due, due + 200, &tz).unwrap(),
            Some(at("2026-12-01T02:00:00Z"))
        );
        // Fired 3.5 h late: one firing, the next on the beat after now.
        assert_eq!(
            every
                .after_firing(due, at("2026-12-01T04:30:00Z"), &tz)
                .unwrap(),
            Some(at("2026-12-01T05:00:00Z"))
        );
        assert!(Recurrence::interval("0s").is_err());
        assert!(Recurrence::interval("-1h").is_err());
        assert!(Recurrence::interval("500ms").is_err());
        assert!(Recurrence::interval("daily").is_err());
        let once = Recurrence::Once(due);
        assert_eq!(once.first(t0, &tz).unwrap(), Some(due));
        assert_eq!(once.after_firing(due, due, &tz).unwrap(), None);
        // A cron fired late: the next time after now, not after the due one.
        let cron = Recurrence::Cron(Cron::parse("0 * * * *").unwrap());
        assert_eq!(
            cron.after_firing(due, at("2026-12-01T04:30:00Z"), &tz)
                .unwrap(),
            Some(at("2026-12-01T05:00:00Z"))
        );
    }

    #[test]
    fn windows_contain_or_come_next() {
        let nightly = WindowRule::parse("0 22 * * *", "4h", "Europe/Berlin").unwrap();
        // 22:00–02:00 Berlin = 21:00–01:00 UTC in winter.
        let inside = window_at(std::slice::from_ref(&nightly), at("2026-12-01T23:30:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(show(inside.start_ms), "2026-12-01T21:00:00Z");
        assert_eq!(show(inside.end_ms), "2026-12-02T01:00:00Z");
        assert!(inside.contains(at("2026-12-01T23:30:00Z")));
        let later = window_at(std::slice::from_ref(&nightly), at("2026-12-02T12:00:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(show(later.start_ms), "2026-12-02T21:00:00Z");
        assert!(!later.contains(at("2026-12-02T12:00:00Z")));
        // The end is exclusive.
        let at_end = window_at(std::slice::from_ref(&nightly), at("2026-12-02T01:00:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(show(at_end.start_ms), "2026-12-02T21:00:00Z");
        // Of two windows, an open one wins over one that opens sooner.
        let noon = WindowRule::parse("0 12 * * *", "1h", "UTC").unwrap();
        let both = [noon.clone(), nightly.clone()];
        let o = window_at(&both, at("2026-12-01T11:00:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(show(o.start_ms), "2026-12-01T12:00:00Z");
        let o = window_at(&both, at("2026-12-01T23:00:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(show(o.start_ms), "2026-12-01T21:00:00Z");
        // Overlapping openings are one: every 30 min for an hour is always open.
        let rolling = WindowRule::parse("*/30 * * * *", "1h", "UTC").unwrap();
        let o = window_at(std::slice::from_ref(&rolling), at("2026-12-01T10:10:00Z"))
            .unwrap()
            .unwrap();
        assert!(o.contains(at("2026-12-01T10:10:00Z")));
        assert!(o.end_ms - o.start_ms > 3_600_000);
        for bad in ["0s", "30s", "169h", "x"] {
            assert!(
                WindowRule::parse("0 22 * * *", bad, "UTC").is_err(),
                "{bad}"
            );
        }
    }
}
