//! Text → compiled bitsets. Every malformed input is a [`CronError`] naming the field;
//! nothing here panics on user input.

use super::{Compiled, CronError, CronExpression, CronField, DayOfMonth, DayOfWeek, YEAR_MAX, YEAR_MIN};

const MONTH_NAMES: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const WEEKDAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// The longest number we read; anything longer is out of range for every field and
/// would otherwise overflow.
const DIGITS_MAX: usize = 4;

/// The value range and names of one field.
struct Spec {
    field: CronField,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// The number the first name stands for (1 for months, 0 for weekdays).
    names_start: u32,
}

const SECOND: Spec = Spec { field: CronField::Second, min: 0, max: 59, names: &[], names_start: 0 };
const MINUTE: Spec = Spec { field: CronField::Minute, min: 0, max: 59, names: &[], names_start: 0 };
const HOUR: Spec = Spec { field: CronField::Hour, min: 0, max: 23, names: &[], names_start: 0 };
const DAY_OF_MONTH: Spec = Spec { field: CronField::DayOfMonth, min: 1, max: 31, names: &[], names_start: 0 };
const MONTH: Spec = Spec { field: CronField::Month, min: 1, max: 12, names: &MONTH_NAMES, names_start: 1 };
/// Day-of-week values run 0–7 (7 is Sunday again); `*` covers 0–6.
const DAY_OF_WEEK: Spec = Spec { field: CronField::DayOfWeek, min: 0, max: 7, names: &WEEKDAY_NAMES, names_start: 0 };
const YEAR: Spec =
    Spec { field: CronField::Year, min: YEAR_MIN as u32, max: YEAR_MAX as u32, names: &[], names_start: 0 };

pub(super) fn parse(text: &str) -> Result<CronExpression, CronError> {
    let fields: Vec<String> = text.split_whitespace().map(|f| f.to_ascii_uppercase()).collect();
    let (second, rest) = match fields.len() {
        5 => ("0", &fields[..]),
        6 | 7 => (fields[0].as_str(), &fields[1..]),
        found => return Err(CronError::FieldCount { found }),
    };
    let seconds = parse_plain(second, &SECOND)?;
    let minutes = parse_plain(&rest[0], &MINUTE)?;
    let hours = parse_plain(&rest[1], &HOUR)?;
    let day_of_month = parse_day_of_month(&rest[2])?;
    let months = parse_plain(&rest[3], &MONTH)?;
    let day_of_week = parse_day_of_week(&rest[4])?;
    let years = match rest.get(5) {
        None => None,
        Some(text) if text == "*" => None,
        Some(text) => Some(parse_years(text)?),
    };
    if !day_of_week.restricted && !falls_in_some_month(&day_of_month, months as u16) {
        // Quartz refuses such a trigger too: it could only ever be `Complete`.
        let problem = "no selected day exists in any selected month (such as 30 FEB): the expression never fires";
        return Err(error(&DAY_OF_MONTH, &rest[2], problem));
    }
    let compiled =
        Compiled { seconds, minutes, hours: hours as u32, months: months as u16, years, day_of_month, day_of_week };
    Ok(CronExpression { text: fields.join(" "), compiled })
}

/// Whether the day-of-month rules select a day that exists in some month of `months`
/// (bit n = month n), in some year: February has 29 days at most.
fn falls_in_some_month(dom: &DayOfMonth, months: u16) -> bool {
    const LONGEST: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !dom.restricted || dom.last_weekday {
        return true;
    }
    (1..=12u32).filter(|m| months & (1 << m) != 0).any(|m| {
        let last = LONGEST[(m - 1) as usize];
        let up_to_last = ((1u64 << (last + 1)) - 2) as u32; // bits 1..=last
        dom.days & up_to_last != 0 || dom.nearest_weekday & up_to_last != 0 || dom.before_last & ((1 << last) - 1) != 0
    })
}

fn error(spec: &Spec, text: &str, problem: impl Into<String>) -> CronError {
    CronError::Field { field: spec.field, text: text.to_owned(), problem: problem.into() }
}

/// Splits a field into its comma-separated items, rejecting empty items.
fn items<'a>(text: &'a str, spec: &Spec) -> Result<impl Iterator<Item = &'a str>, CronError> {
    if text.split(',').any(str::is_empty) {
        return Err(error(spec, text, "empty list item"));
    }
    Ok(text.split(','))
}

/// A field of plain items only (`*`, values, ranges, steps, names), as a bitset.
fn parse_plain(text: &str, spec: &Spec) -> Result<u64, CronError> {
    let mut bits = 0u64;
    for item in items(text, spec)? {
        bits |= parse_item(item, text, spec)?;
    }
    Ok(bits)
}

fn parse_years(text: &str) -> Result<[u64; 3], CronError> {
    let mut bits = [0u64; 3];
    for item in items(text, &YEAR)? {
        let (first, last, step) = parse_range(item, text, &YEAR)?;
        let mut year = first;
        while year <= last {
            let offset = (year - YEAR.min) as usize;
            bits[offset / 64] |= 1 << (offset % 64);
            year += step;
        }
    }
    Ok(bits)
}

/// One plain item as a bitset over the field's values.
fn parse_item(item: &str, field_text: &str, spec: &Spec) -> Result<u64, CronError> {
    let (first, last, step) = parse_range(item, field_text, spec)?;
    let mut bits = 0u64;
    let mut value = first;
    while value <= last {
        bits |= 1 << value;
        value += step;
    }
    if spec.field == CronField::DayOfWeek && bits & (1 << 7) != 0 {
        // 7 is Sunday as well as 0.
        bits = (bits & !(1 << 7)) | 1;
    }
    Ok(bits)
}

/// `*`, `*/n`, `a`, `a/n`, `a-b`, `a-b/n` → (first, last, step).
fn parse_range(item: &str, field_text: &str, spec: &Spec) -> Result<(u32, u32, u32), CronError> {
    let (base, step) = match item.split_once('/') {
        None => (item, None),
        Some((base, step)) => (base, Some(step)),
    };
    let (first, last) = if base == "*" {
        let last = if spec.field == CronField::DayOfWeek { 6 } else { spec.max };
        (spec.min, last)
    } else if base == "?" {
        return Err(error(spec, field_text, "'?' must be the whole field"));
    } else if let Some((a, b)) = base.split_once('-') {
        let first = parse_value(a, field_text, spec, None)?;
        let last = parse_value(b, field_text, spec, Some(first))?;
        if first > last {
            return Err(error(
                spec,
                field_text,
                format!("reversed range '{base}': ranges do not wrap around; write two ranges instead"),
            ));
        }
        (first, last)
    } else {
        let first = parse_value(base, field_text, spec, None)?;
        // `a/n` runs from a to the field's end; a lone `a` is just a.
        (first, if step.is_some() { spec.max } else { first })
    };
    let step = match step {
        None => 1,
        Some(step) => {
            let span = spec.max - spec.min + 1;
            let n =
                parse_number(step).ok_or_else(|| error(spec, field_text, format!("step '{step}' is not a number")))?;
            if n == 0 {
                return Err(error(spec, field_text, "step must be at least 1"));
            }
            if n > span {
                return Err(error(spec, field_text, format!("step {n} is larger than the field's {span} values")));
            }
            n
        }
    };
    Ok((first, last, step))
}

/// A number or a name, checked against the field's range. At the end of a day-of-week
/// range that starts after Sunday (`range_start`), `SUN` means 7, so `MON-SUN` is Monday to
/// Sunday; a range that starts on Sunday ends on it too (`SUN-SUN` is Sunday, as `0-0`
/// is, not the whole week).
fn parse_value(text: &str, field_text: &str, spec: &Spec, range_start: Option<u32>) -> Result<u32, CronError> {
    let value = if let Some(n) = parse_number(text) {
        n
    } else if let Some(index) = spec.names.iter().position(|name| *name == text) {
        let value = index as u32 + spec.names_start;
        if spec.field == CronField::DayOfWeek && value == 0 && range_start.is_some_and(|start| start > 0) {
            7
        } else {
            value
        }
    } else if text.is_empty() {
        return Err(error(spec, field_text, "missing value"));
    } else {
        let expected = if spec.names.is_empty() {
            "a number".to_owned()
        } else {
            format!("a number or a name ({}–{})", spec.names[0], spec.names[spec.names.len() - 1])
        };
        return Err(error(spec, field_text, format!("'{text}' is not {expected}")));
    };
    if value < spec.min || value > spec.max {
        return Err(error(spec, field_text, format!("value {value} is out of range {}–{}", spec.min, spec.max)));
    }
    Ok(value)
}

/// Decimal digits only (no sign), at most [`DIGITS_MAX`] of them.
fn parse_number(text: &str) -> Option<u32> {
    if text.is_empty() || text.len() > DIGITS_MAX || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn parse_day_of_month(text: &str) -> Result<DayOfMonth, CronError> {
    let spec = &DAY_OF_MONTH;
    let mut dom = DayOfMonth { restricted: text != "*" && text != "?", ..DayOfMonth::default() };
    if text == "?" {
        dom.days = parse_item("*", text, spec)? as u32;
        return Ok(dom);
    }
    for item in items(text, spec)? {
        if item == "L" {
            dom.before_last |= 1;
        } else if item == "LW" {
            dom.last_weekday = true;
        } else if let Some(offset) = item.strip_prefix("L-") {
            let n = parse_number(offset)
                .filter(|n| *n <= 30)
                .ok_or_else(|| error(spec, text, format!("'{item}': L-n needs n from 0 to 30")))?;
            dom.before_last |= 1 << n;
        } else if let Some(day) = item.strip_suffix('W') {
            let n = parse_number(day)
                .filter(|n| (1..=31).contains(n))
                .ok_or_else(|| error(spec, text, format!("'{item}': nW needs a day n from 1 to 31")))?;
            dom.nearest_weekday |= 1 << n;
        } else if item.contains('L') || item.contains('W') || item.contains('#') {
            return Err(error(spec, text, format!("'{item}' is not a valid day-of-month item")));
        } else {
            dom.days |= parse_item(item, text, spec)? as u32;
        }
    }
    Ok(dom)
}

fn parse_day_of_week(text: &str) -> Result<DayOfWeek, CronError> {
    let spec = &DAY_OF_WEEK;
    let mut dow = DayOfWeek { restricted: text != "*" && text != "?", ..DayOfWeek::default() };
    if text == "?" {
        dow.days = parse_item("*", text, spec)? as u8;
        return Ok(dow);
    }
    for item in items(text, spec)? {
        if item == "L" || item.starts_with("L-") || item.starts_with("L/") {
            return Err(error(
                spec,
                text,
                "a bare L is not allowed in day-of-week; write nL (e.g. 5L or FRIL) for the last weekday n",
            ));
        } else if let Some((day, nth)) = item.split_once('#') {
            let weekday = parse_value(day, text, spec, None)? % 7;
            let k = parse_number(nth)
                .filter(|k| (1..=5).contains(k))
                .ok_or_else(|| error(spec, text, format!("'{item}': n#k needs k from 1 to 5")))?;
            dow.nth[k as usize - 1] |= 1 << weekday;
        } else if let Some(day) = item.strip_suffix('L') {
            let weekday = parse_value(day, text, spec, None)? % 7;
            dow.last |= 1 << weekday;
        } else {
            dow.days |= parse_item(item, text, spec)? as u8;
        }
    }
    Ok(dow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_error(text: &str) -> CronField {
        match CronExpression::parse(text) {
            Err(CronError::Field { field, .. }) => field,
            other => panic!("expected a field error for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn field_counts() {
        assert!(CronExpression::parse("* * * * *").is_ok());
        assert!(CronExpression::parse("* * * * * *").is_ok());
        assert!(CronExpression::parse("* * * * * * 2030").is_ok());
        for text in ["", "* * * *", "* * * * * * * *"] {
            assert!(matches!(CronExpression::parse(text), Err(CronError::FieldCount { .. })), "{text}");
        }
    }

    #[test]
    fn days_no_selected_month_has_are_refused() {
        for text in ["0 0 0 30 2 *", "0 0 0 30,31 FEB ?", "0 0 0 31 4,6,9,11 *", "0 0 0 30W 2 *", "0 0 0 L-29 2 *"] {
            assert_eq!(field_error(text), CronField::DayOfMonth, "{text}");
        }
        let message = CronExpression::parse("0 0 0 30 2 *").unwrap_err().to_string();
        assert!(message.contains("never fires"), "{message}");
        // Days some selected month has (29 FEB in leap years), the month-relative forms,
        // and a day-of-week alternative all fire.
        for text in [
            "0 0 0 29 2 *",
            "0 0 0 31 1-2 *",
            "0 0 0 L 2 *",
            "0 0 0 LW 2 *",
            "0 0 0 L-28 2 *",
            "0 0 0 29W 2 *",
            "0 0 0 30 2 MON",
        ] {
            assert!(CronExpression::parse(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn five_fields_mean_second_zero() {
        let expr = CronExpression::parse("*/5 * * * *").unwrap();
        assert_eq!(expr.compiled.seconds, 1);
        assert_eq!(expr.compiled.minutes.count_ones(), 12);
    }

    #[test]
    fn names_ranges_steps_and_lists() {
        let expr = CronExpression::parse("0 0 9 * jan,Mar-May/2 mon-fri").unwrap();
        assert_eq!(expr.compiled.months, (1 << 1) | (1 << 3) | (1 << 5));
        assert_eq!(expr.compiled.day_of_week.days, 0b0111110);
        assert_eq!(expr.to_string(), "0 0 9 * JAN,MAR-MAY/2 MON-FRI");
        let expr = CronExpression::parse("10/20 5-50/15 */6 * * *").unwrap();
        assert_eq!(expr.compiled.seconds, (1 << 10) | (1 << 30) | (1 << 50));
        assert_eq!(expr.compiled.minutes, (1 << 5) | (1 << 20) | (1 << 35) | (1 << 50));
        assert_eq!(expr.compiled.hours, (1 << 0) | (1 << 6) | (1 << 12) | (1 << 18));
    }

    #[test]
    fn sunday_is_zero_and_seven() {
        let zero = CronExpression::parse("0 0 * * 0").unwrap();
        let seven = CronExpression::parse("0 0 * * 7").unwrap();
        let sun = CronExpression::parse("0 0 * * SUN").unwrap();
        assert_eq!(zero.compiled.day_of_week.days, 1);
        assert_eq!(seven.compiled.day_of_week.days, 1);
        assert_eq!(sun.compiled.day_of_week.days, 1);
        assert_eq!(CronExpression::parse("0 0 * * 5-7").unwrap().compiled.day_of_week.days, 0b1100001);
        assert_eq!(CronExpression::parse("0 0 * * MON-SUN").unwrap().compiled.day_of_week.days, 0b1111111);
        // A range that starts on Sunday ends on it when it ends with 0 or `SUN`, whichever
        // spelling; written up to 7, it is the whole week.
        for sunday in ["0-0", "SUN-SUN", "0-SUN", "SUN-0", "sun-sun/2"] {
            let days = CronExpression::parse(&format!("0 0 * * {sunday}")).unwrap().compiled.day_of_week.days;
            assert_eq!(days, 1, "{sunday}");
        }
        for week in ["0-7", "SUN-7"] {
            let days = CronExpression::parse(&format!("0 0 * * {week}")).unwrap().compiled.day_of_week.days;
            assert_eq!(days, 0b1111111, "{week}");
        }
        assert_eq!(CronExpression::parse("0 0 * * 7#2").unwrap().compiled.day_of_week.nth[1], 1);
    }

    #[test]
    fn day_extras() {
        let dom = CronExpression::parse("0 0 0 L,L-3,15W,LW * ?").unwrap().compiled.day_of_month;
        assert!(dom.restricted);
        assert_eq!(dom.before_last, 0b1001);
        assert_eq!(dom.nearest_weekday, 1 << 15);
        assert!(dom.last_weekday);
        let dow = CronExpression::parse("0 0 0 ? * FRIL,2#3").unwrap().compiled.day_of_week;
        assert_eq!(dow.last, 1 << 5);
        assert_eq!(dow.nth[2], 1 << 2);
        assert!(!CronExpression::parse("0 0 0 ? * *").unwrap().compiled.day_of_month.restricted);
    }

    #[test]
    fn rejects_with_the_field_named() {
        assert_eq!(field_error("0 0 0 * * L"), CronField::DayOfWeek);
        assert_eq!(field_error("0 0 0 * * FRI-MON"), CronField::DayOfWeek);
        assert_eq!(field_error("0 0 22-2 * * *"), CronField::Hour);
        assert_eq!(field_error("60 * * * * *"), CronField::Second);
        assert_eq!(field_error("* 60 * * * *"), CronField::Minute);
        assert_eq!(field_error("* * 24 * * *"), CronField::Hour);
        assert_eq!(field_error("* * * 0 * *"), CronField::DayOfMonth);
        assert_eq!(field_error("* * * 32 * *"), CronField::DayOfMonth);
        assert_eq!(field_error("* * * * 13 *"), CronField::Month);
        assert_eq!(field_error("* * * * * 8"), CronField::DayOfWeek);
        assert_eq!(field_error("* * * * * * 1969"), CronField::Year);
        assert_eq!(field_error("* * * * * * 2100"), CronField::Year);
        assert_eq!(field_error("*/0 * * * * *"), CronField::Second);
        assert_eq!(field_error("* * * * * 1#6"), CronField::DayOfWeek);
        assert_eq!(field_error("* * * 0W * *"), CronField::DayOfMonth);
        assert_eq!(field_error("* * * L-31 * *"), CronField::DayOfMonth);
        assert_eq!(field_error("* * * 1,,2 * *"), CronField::DayOfMonth);
        assert_eq!(field_error("* * * 1-? * *"), CronField::DayOfMonth);
        assert_eq!(field_error("? * * * * *"), CronField::Second);
        assert_eq!(field_error("* * * * JANUARY *"), CronField::Month);
        assert_eq!(field_error("-1 * * * * *"), CronField::Second);
        assert_eq!(field_error("99999999999 * * * * *"), CronField::Second);
    }

    #[test]
    fn display_round_trips() {
        for text in ["0 0 9 * * MON-FRI", "*/5 * * * *", "0 0 0 L-2 * ?", "0 15 10 ? * 6#3 2030-2040/2"] {
            let expr = CronExpression::parse(text).unwrap();
            assert_eq!(CronExpression::parse(&expr.to_string()).unwrap(), expr);
        }
        assert_eq!(CronExpression::parse("  0\t0  9 * * mon ").unwrap().to_string(), "0 0 9 * * MON");
    }
}
