//! Schedules in words, for people reading a dashboard: "every weekday at 09:00
//! Asia/Shanghai", "每个工作日 09:00（Asia/Shanghai）".
//!
//! The common cron shapes (a time of day on every day, on weekdays, on named weekdays, on
//! a day of the month or its last day; every n seconds, minutes or hours) are put in
//! words; any other expression is left as it is written (`None`), never described
//! wrongly.

use std::time::Duration;

use crate::schedule::{JobSchedule, ScheduleKind};

/// A schedule in English and in Chinese.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Described {
    /// In English.
    pub en: String,
    /// In Chinese.
    pub zh: String,
}

impl Described {
    fn new(en: impl Into<String>, zh: impl Into<String>) -> Self {
        Self { en: en.into(), zh: zh.into() }
    }
}

/// `schedule` in words; `None` for a cron expression of a shape not put in words (show
/// the expression itself).
pub fn describe(schedule: &JobSchedule) -> Option<Described> {
    let mut words = match &schedule.kind {
        ScheduleKind::Manual => Described::new("by hand only", "仅手动触发"),
        ScheduleKind::Every { interval, repeat_count } => {
            let every = duration(*interval);
            let mut words = Described::new(
                format!("every {every} after the previous run ends"),
                format!("上次运行结束后每隔 {every}"),
            );
            if let Some(count) = repeat_count {
                words.en.push_str(&format!(", {count} times in all"));
                words.zh.push_str(&format!("，共 {count} 次"));
            }
            words
        }
        ScheduleKind::Cron { expression, time_zone } => {
            let mut words = cron(expression.as_str())?;
            words.en.push_str(&format!(" {}", time_zone.name()));
            words.zh.push_str(&format!("（{}）", time_zone.name()));
            words
        }
        ScheduleKind::Once { at } => {
            let at = at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
            Described::new(format!("once, at {at}"), format!("一次，于 {at}"))
        }
    };
    if let Some(calendar) = &schedule.calendar {
        words.en.push_str(&format!(", skipping what calendar {calendar} excludes"));
        words.zh.push_str(&format!("，跳过日历 {calendar} 排除的时间"));
    }
    Some(words)
}

/// `1h 30m`, `45s`, `250ms`.
fn duration(d: Duration) -> String {
    let mut parts = Vec::new();
    let mut secs = d.as_secs();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs >= size {
            parts.push(format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if secs > 0 {
        parts.push(format!("{secs}s"));
    }
    let millis = d.subsec_millis();
    if millis > 0 {
        parts.push(format!("{millis}ms"));
    }
    if parts.is_empty() {
        parts.push(format!("{}µs", d.subsec_micros()));
    }
    parts.join(" ")
}

const DAYS_EN: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const DAYS_ZH: [&str; 7] = ["周日", "周一", "周二", "周三", "周四", "周五", "周六"];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// A plain number field.
fn number(field: &str) -> Option<u32> {
    field.parse().ok()
}

/// `*/n` (or `0/n`): every n.
fn step(field: &str) -> Option<u32> {
    let (start, n) = field.split_once('/')?;
    matches!(start, "*" | "0").then_some(())?;
    number(n).filter(|n| *n > 1)
}

fn any(field: &str) -> bool {
    matches!(field, "*" | "?")
}

/// One day of the week, 0–6 from Sunday (7 is Sunday too).
fn weekday(field: &str) -> Option<usize> {
    let upper = field.to_ascii_uppercase();
    DAY_NAMES.iter().position(|d| *d == upper).or_else(|| number(field).filter(|n| *n <= 7).map(|n| n as usize % 7))
}

/// The days of a day-of-week field: a day, a list of days, or a range of them.
fn weekdays(field: &str) -> Option<Vec<usize>> {
    let mut days = Vec::new();
    for part in field.split(',') {
        match part.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (weekday(from)?, weekday(to)?);
                // A range ending on Sunday as 7 (`1-7`) reads as from `from` to Saturday, then Sunday.
                let to = if to == 0 && from > 0 { 7 } else { to };
                (from <= to).then_some(())?;
                days.extend((from..=to).map(|d| d % 7));
            }
            None => days.push(weekday(part)?),
        }
    }
    days.sort_unstable();
    days.dedup();
    Some(days)
}

/// Which days, when the expression restricts them in a way said in words; `None` for
/// every day.
enum Days {
    Every,
    Weekdays,
    Weekend,
    These(Vec<usize>),
    OfMonth(u32),
    LastOfMonth,
}

fn days(dom: &str, month: &str, dow: &str, year: Option<&str>) -> Option<Days> {
    if !any(month) || year.is_some_and(|y| !any(y)) {
        return None;
    }
    match (any(dom), any(dow)) {
        (true, true) => Some(Days::Every),
        (true, false) => {
            let days = weekdays(dow)?;
            Some(match days.as_slice() {
                [1, 2, 3, 4, 5] => Days::Weekdays,
                [0, 6] => Days::Weekend,
                [0, 1, 2, 3, 4, 5, 6] => Days::Every,
                _ => Days::These(days),
            })
        }
        (false, true) if dom == "L" => Some(Days::LastOfMonth),
        (false, true) => number(dom).filter(|d| (1..=31).contains(d)).map(Days::OfMonth),
        (false, false) => None,
    }
}

fn list(items: &[String], and: &str, comma: &str) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{}{and}{last}", init.join(comma)),
    }
}

impl Days {
    /// "every weekday", "每个工作日".
    fn words(&self) -> Described {
        match self {
            Self::Every => Described::new("every day", "每天"),
            Self::Weekdays => Described::new("every weekday", "每个工作日"),
            Self::Weekend => Described::new("every Saturday and Sunday", "每周六和周日"),
            Self::These(days) => {
                let en: Vec<String> = days.iter().map(|d| DAYS_EN[*d].to_owned()).collect();
                let zh: Vec<String> = days.iter().map(|d| DAYS_ZH[*d].to_owned()).collect();
                Described::new(format!("every {}", list(&en, " and ", ", ")), format!("每{}", list(&zh, "和", "、")))
            }
            Self::OfMonth(day) => Described::new(format!("on day {day} of every month"), format!("每月 {day} 日")),
            Self::LastOfMonth => Described::new("on the last day of every month", "每月最后一天"),
        }
    }
}

/// A cron expression's text in words, if of a common shape.
fn cron(text: &str) -> Option<Described> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let (sec, min, hour, dom, month, dow, year) = match fields.as_slice() {
        [min, hour, dom, month, dow] => ("0", *min, *hour, *dom, *month, *dow, None),
        [sec, min, hour, dom, month, dow] => (*sec, *min, *hour, *dom, *month, *dow, None),
        [sec, min, hour, dom, month, dow, year] => (*sec, *min, *hour, *dom, *month, *dow, Some(*year)),
        _ => return None,
    };
    let days = days(dom, month, dow, year)?;
    let every_day = matches!(days, Days::Every);
    // Cadences within a day: said for every day only.
    let cadence = match (sec, min, hour) {
        ("*", "*", "*") => Some(Described::new("every second", "每秒")),
        (s, "*", "*") if step(s).is_some() => {
            let n = step(s)?;
            Some(Described::new(format!("every {n} seconds"), format!("每 {n} 秒")))
        }
        ("0", "*", "*") => Some(Described::new("every minute", "每分钟")),
        ("0", m, "*") if step(m).is_some() => {
            let n = step(m)?;
            Some(Described::new(format!("every {n} minutes"), format!("每 {n} 分钟")))
        }
        ("0", m, "*") if number(m).is_some() => {
            let m = number(m)?;
            Some(Described::new(format!("every hour at minute {m}"), format!("每小时第 {m} 分")))
        }
        ("0", m, h) if number(m).is_some() && step(h).is_some() => {
            let (m, n) = (number(m)?, step(h)?);
            Some(Described::new(format!("every {n} hours at minute {m}"), format!("每 {n} 小时的第 {m} 分")))
        }
        _ => None,
    };
    if let Some(cadence) = cadence {
        return every_day.then_some(cadence);
    }
    // Times of day: a second, a minute and one or more hours.
    let (sec, min) = (number(sec).filter(|s| *s < 60)?, number(min).filter(|m| *m < 60)?);
    let hours: Vec<u32> = hour.split(',').map(|h| number(h).filter(|h| *h < 24)).collect::<Option<_>>()?;
    let times: Vec<String> = hours
        .iter()
        .map(|h| if sec == 0 { format!("{h:02}:{min:02}") } else { format!("{h:02}:{min:02}:{sec:02}") })
        .collect();
    let day = days.words();
    Some(Described::new(
        format!("{} at {}", day.en, list(&times, " and ", ", ")),
        format!("{} {}", day.zh, list(&times, " 和 ", "、")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Option<(String, String)> {
        let schedule: JobSchedule = text.parse().unwrap();
        describe(&schedule).map(|d| (d.en, d.zh))
    }

    fn en(text: &str) -> Option<String> {
        words(text).map(|(en, _)| en)
    }

    #[test]
    fn common_cron_shapes_are_put_in_words() {
        assert_eq!(
            words("cron 0 0 9 * * MON-FRI tz=Asia/Shanghai"),
            Some(("every weekday at 09:00 Asia/Shanghai".into(), "每个工作日 09:00（Asia/Shanghai）".into()))
        );
        assert_eq!(en("cron 0 30 2 * * ?").as_deref(), Some("every day at 02:30 UTC"));
        assert_eq!(en("cron 15 30 2 * * *").as_deref(), Some("every day at 02:30:15 UTC"));
        assert_eq!(en("cron 0 0 9,17 * * *").as_deref(), Some("every day at 09:00 and 17:00 UTC"));
        assert_eq!(en("cron 0 0 8 ? * 1-5").as_deref(), Some("every weekday at 08:00 UTC"));
        assert_eq!(en("cron 0 0 8 ? * SAT,SUN").as_deref(), Some("every Saturday and Sunday at 08:00 UTC"));
        assert_eq!(
            en("cron 0 0 8 ? * MON,WED,FRI").as_deref(),
            Some("every Monday, Wednesday and Friday at 08:00 UTC")
        );
        assert_eq!(words("cron 0 0 8 ? * MON,WED,FRI").unwrap().1, "每周一、周三和周五 08:00（UTC）");
        assert_eq!(en("cron 0 0 6 1 * ?").as_deref(), Some("on day 1 of every month at 06:00 UTC"));
        assert_eq!(en("cron 0 0 23 L * ?").as_deref(), Some("on the last day of every month at 23:00 UTC"));
        assert_eq!(en("cron */5 * * * * *").as_deref(), Some("every 5 seconds UTC"));
        assert_eq!(en("cron 0 */15 * * * *").as_deref(), Some("every 15 minutes UTC"));
        assert_eq!(en("cron 0 0 */2 * * *").as_deref(), Some("every 2 hours at minute 0 UTC"));
        assert_eq!(en("cron * * * * * *").as_deref(), Some("every second UTC"));
        assert_eq!(en("cron 0 * * * * *").as_deref(), Some("every minute UTC"));
        assert_eq!(words("cron 0 */15 * * * * tz=Europe/Berlin").unwrap().1, "每 15 分钟（Europe/Berlin）");
    }

    #[test]
    fn other_shapes_are_left_as_written() {
        for text in [
            "cron 0 0 9 * JAN ?",        // a month
            "cron 0 0 9 ? * 6#3",        // the third Friday
            "cron 0 0 9 15W * ?",        // nearest weekday
            "cron 0 0-30 9 * * ?",       // a range of minutes
            "cron 0 0 9 * * ? 2027",     // a year
            "cron 0 */15 * ? * MON-FRI", // a cadence on some days
            "cron 0 0 9 1 * MON",        // both day fields
        ] {
            assert_eq!(en(text), None, "{text}");
        }
    }

    #[test]
    fn intervals_one_shots_and_manual_triggers_are_put_in_words() {
        assert_eq!(en("manual").as_deref(), Some("by hand only"));
        assert_eq!(
            words("every 01:30:00 x5"),
            Some((
                "every 1h 30m after the previous run ends, 5 times in all".into(),
                "上次运行结束后每隔 1h 30m，共 5 次".into()
            ))
        );
        assert_eq!(en("every 00:00:00.250").as_deref(), Some("every 250ms after the previous run ends"));
        assert_eq!(en("once 2026-11-01T09:00:00Z").as_deref(), Some("once, at 2026-11-01T09:00:00Z"));
        assert_eq!(
            en("cron 0 0 9 * * ? calendar=holidays").as_deref(),
            Some("every day at 09:00 UTC, skipping what calendar holidays excludes")
        );
    }
}
