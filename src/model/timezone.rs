//! Time zone ids: IANA names through `chrono-tz`, plus Windows names mapped to IANA.
//!
//! Windows ids (`China Standard Time`, `Eastern Standard Time`, …) map to the IANA zone
//! CLDR names as the territory-`001` default in `common/supplemental/windowsZones.xml`.
//! The table below is that mapping, sorted by Windows id so lookup is a binary search.

use std::sync::OnceLock;

use chrono::{DateTime, LocalResult, Offset, TimeZone};
use chrono_tz::{Tz, TZ_VARIANTS};

/// A time zone id that is neither an IANA id known to `chrono-tz` nor a Windows id in
/// the CLDR mapping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown time zone '{id}': expected an IANA id (e.g. Asia/Shanghai) or a Windows id (e.g. China Standard Time)"
)]
pub struct UnknownTimeZone {
    /// The id as given.
    pub id: String,
}

/// Resolves an IANA or Windows time zone id.
///
/// IANA ids are matched exactly first, then case-insensitively; Windows ids are matched
/// case-insensitively against the CLDR table. An empty id is an error, not UTC: callers
/// that default to UTC do so before calling.
///
/// # Errors
/// [`UnknownTimeZone`] when the id is in neither set.
pub fn parse_time_zone(id: &str) -> Result<Tz, UnknownTimeZone> {
    let trimmed = id.trim();
    if let Ok(tz) = trimmed.parse::<Tz>() {
        return Ok(tz);
    }
    if let Ok(tz) = Tz::from_str_insensitive(trimmed) {
        return Ok(tz);
    }
    if let Some(iana) = windows_to_iana(trimmed) {
        if let Ok(tz) = iana.parse::<Tz>() {
            return Ok(tz);
        }
    }
    Err(UnknownTimeZone { id: id.to_owned() })
}

/// The IANA id CLDR gives as the default for a Windows time zone id, matched
/// case-insensitively; `None` for an id not in the table.
pub fn windows_to_iana(windows_id: &str) -> Option<&'static str> {
    WINDOWS_ZONES
        .binary_search_by(|(win, _)| cmp_ignore_ascii_case(win, windows_id))
        .ok()
        .map(|index| WINDOWS_ZONES[index].1)
}

fn cmp_ignore_ascii_case(a: &str, b: &str) -> std::cmp::Ordering {
    a.bytes().map(|c| c.to_ascii_lowercase()).cmp(b.bytes().map(|c| c.to_ascii_lowercase()))
}

/// The first instant a [`ZoneTable`] covers: 1969-01-01T00:00:00Z.
const TABLE_FROM: i64 = -31_536_000;
/// The end of what a [`ZoneTable`] covers: 2110-01-01T00:00:00Z (cron years end in 2099,
/// and searches look five years ahead).
const TABLE_UNTIL: i64 = 4_417_977_600;
/// Probe step when building a table. Since 1969 no zone in the tz database has two
/// offset changes less than about a week apart, so a daily probe sees every change;
/// the builder checks that each bisected change is a single step and otherwise leaves the
/// zone to chrono-tz.
const PROBE_STEP: i64 = 86_400;
/// More than any offset from UTC, so every wall time's instants lie within this of it.
const OFFSET_BOUND: i64 = 27 * 3600;

/// A zone's offset changes between 1969 and 2110 as a sorted array, so offset lookups
/// and wall-time mappings are a binary search over plain integers. chrono-tz answers the
/// same questions but keeps its spans private; this table is derived from it once per
/// zone and process.
#[derive(Debug)]
pub(crate) struct ZoneTable {
    /// UTC instants (seconds) at which the offset changes, ascending.
    transitions: Vec<i64>,
    /// `offsets[i]` holds before `transitions[i]`; the last entry after the last change.
    offsets: Vec<i64>,
}

impl ZoneTable {
    /// The table of `tz`, built on first use; `None` when the zone breaks the table's
    /// assumptions (callers then ask chrono-tz directly).
    pub(crate) fn of(tz: &Tz) -> Option<&'static ZoneTable> {
        static TABLES: [OnceLock<Option<ZoneTable>>; TZ_VARIANTS.len()] =
            [const { OnceLock::new() }; TZ_VARIANTS.len()];
        TABLES.get(*tz as usize)?.get_or_init(|| ZoneTable::build(tz)).as_ref()
    }

    fn build(tz: &Tz) -> Option<ZoneTable> {
        let offset = |t: i64| -> Option<i64> {
            let naive = DateTime::from_timestamp(t, 0)?.naive_utc();
            Some(i64::from(tz.offset_from_utc_datetime(&naive).fix().local_minus_utc()))
        };
        let mut current = offset(TABLE_FROM)?;
        let mut table = ZoneTable { transitions: Vec::new(), offsets: vec![current] };
        let mut t = TABLE_FROM;
        while t < TABLE_UNTIL {
            let next = (t + PROBE_STEP).min(TABLE_UNTIL);
            let after = offset(next)?;
            if after != current {
                let (mut lo, mut hi) = (t, next);
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    let at_mid = offset(mid)?;
                    if at_mid == current {
                        lo = mid;
                    } else if at_mid == after {
                        hi = mid;
                    } else {
                        // Two changes within one probe step: not representable here.
                        return None;
                    }
                }
                table.transitions.push(hi);
                table.offsets.push(after);
                current = after;
            }
            t = next;
        }
        Some(table)
    }

    /// The offset from UTC (seconds) at the UTC instant `utc`, if the table covers it.
    pub(crate) fn offset_at(&self, utc: i64) -> Option<i64> {
        if !(TABLE_FROM..TABLE_UNTIL).contains(&utc) {
            return None;
        }
        Some(self.offsets[self.transitions.partition_point(|&t| t <= utc)])
    }

    /// The first offset change after the UTC instant `utc` (seconds), `Some(None)` when
    /// there is none before the table's end, `None` when the table does not cover `utc`.
    pub(crate) fn change_after(&self, utc: i64) -> Option<Option<i64>> {
        if !(TABLE_FROM..TABLE_UNTIL).contains(&utc) {
            return None;
        }
        Some(self.transitions.get(self.transitions.partition_point(|&t| t <= utc)).copied())
    }

    /// The UTC instants at which the wall time `wall` (seconds on the zone's clock since
    /// 1970-01-01T00:00:00) occurs: none in a DST gap, two in a fold (earlier first), if
    /// the table covers it.
    pub(crate) fn wall_to_utc(&self, wall: i64) -> Option<LocalResult<i64>> {
        if wall - OFFSET_BOUND < TABLE_FROM || wall + OFFSET_BOUND >= TABLE_UNTIL {
            return None;
        }
        // Every occurrence lies within OFFSET_BOUND of `wall`; check each span there.
        let first = self.transitions.partition_point(|&t| t <= wall - OFFSET_BOUND);
        let last = self.transitions.partition_point(|&t| t <= wall + OFFSET_BOUND);
        let mut found = LocalResult::None;
        for span in first..=last {
            let instant = wall - self.offsets[span];
            let begins = span.checked_sub(1).map_or(i64::MIN, |i| self.transitions[i]);
            let ends = self.transitions.get(span).copied().unwrap_or(i64::MAX);
            if (begins..ends).contains(&instant) {
                found = match found {
                    LocalResult::None => LocalResult::Single(instant),
                    LocalResult::Single(a) | LocalResult::Ambiguous(a, _) => {
                        LocalResult::Ambiguous(a.min(instant), a.max(instant))
                    }
                };
            }
        }
        Some(found)
    }
}

/// CLDR windowsZones.xml, territory 001, sorted case-insensitively by Windows id.
static WINDOWS_ZONES: &[(&str, &str)] = &[
    ("Afghanistan Standard Time", "Asia/Kabul"),
    ("Alaskan Standard Time", "America/Anchorage"),
    ("Aleutian Standard Time", "America/Adak"),
    ("Altai Standard Time", "Asia/Barnaul"),
    ("Arab Standard Time", "Asia/Riyadh"),
    ("Arabian Standard Time", "Asia/Dubai"),
    ("Arabic Standard Time", "Asia/Baghdad"),
    ("Argentina Standard Time", "America/Buenos_Aires"),
    ("Astrakhan Standard Time", "Europe/Astrakhan"),
    ("Atlantic Standard Time", "America/Halifax"),
    ("AUS Central Standard Time", "Australia/Darwin"),
    ("Aus Central W. Standard Time", "Australia/Eucla"),
    ("AUS Eastern Standard Time", "Australia/Sydney"),
    ("Azerbaijan Standard Time", "Asia/Baku"),
    ("Azores Standard Time", "Atlantic/Azores"),
    ("Bahia Standard Time", "America/Bahia"),
    ("Bangladesh Standard Time", "Asia/Dhaka"),
    ("Belarus Standard Time", "Europe/Minsk"),
    ("Bougainville Standard Time", "Pacific/Bougainville"),
    ("Canada Central Standard Time", "America/Regina"),
    ("Cape Verde Standard Time", "Atlantic/Cape_Verde"),
    ("Caucasus Standard Time", "Asia/Yerevan"),
    ("Cen. Australia Standard Time", "Australia/Adelaide"),
    ("Central America Standard Time", "America/Guatemala"),
    ("Central Asia Standard Time", "Asia/Bishkek"),
    ("Central Brazilian Standard Time", "America/Cuiaba"),
    ("Central Europe Standard Time", "Europe/Budapest"),
    ("Central European Standard Time", "Europe/Warsaw"),
    ("Central Pacific Standard Time", "Pacific/Guadalcanal"),
    ("Central Standard Time", "America/Chicago"),
    ("Central Standard Time (Mexico)", "America/Mexico_City"),
    ("Chatham Islands Standard Time", "Pacific/Chatham"),
    ("China Standard Time", "Asia/Shanghai"),
    ("Cuba Standard Time", "America/Havana"),
    ("Dateline Standard Time", "Etc/GMT+12"),
    ("E. Africa Standard Time", "Africa/Nairobi"),
    ("E. Australia Standard Time", "Australia/Brisbane"),
    ("E. Europe Standard Time", "Europe/Chisinau"),
    ("E. South America Standard Time", "America/Sao_Paulo"),
    ("Easter Island Standard Time", "Pacific/Easter"),
    ("Eastern Standard Time", "America/New_York"),
    ("Eastern Standard Time (Mexico)", "America/Cancun"),
    ("Egypt Standard Time", "Africa/Cairo"),
    ("Ekaterinburg Standard Time", "Asia/Yekaterinburg"),
    ("Fiji Standard Time", "Pacific/Fiji"),
    ("FLE Standard Time", "Europe/Kiev"),
    ("Georgian Standard Time", "Asia/Tbilisi"),
    ("GMT Standard Time", "Europe/London"),
    ("Greenland Standard Time", "America/Godthab"),
    ("Greenwich Standard Time", "Atlantic/Reykjavik"),
    ("GTB Standard Time", "Europe/Bucharest"),
    ("Haiti Standard Time", "America/Port-au-Prince"),
    ("Hawaiian Standard Time", "Pacific/Honolulu"),
    ("India Standard Time", "Asia/Calcutta"),
    ("Iran Standard Time", "Asia/Tehran"),
    ("Israel Standard Time", "Asia/Jerusalem"),
    ("Jordan Standard Time", "Asia/Amman"),
    ("Kaliningrad Standard Time", "Europe/Kaliningrad"),
    ("Korea Standard Time", "Asia/Seoul"),
    ("Libya Standard Time", "Africa/Tripoli"),
    ("Line Islands Standard Time", "Pacific/Kiritimati"),
    ("Lord Howe Standard Time", "Australia/Lord_Howe"),
    ("Magadan Standard Time", "Asia/Magadan"),
    ("Magallanes Standard Time", "America/Punta_Arenas"),
    ("Marquesas Standard Time", "Pacific/Marquesas"),
    ("Mauritius Standard Time", "Indian/Mauritius"),
    ("Middle East Standard Time", "Asia/Beirut"),
    ("Montevideo Standard Time", "America/Montevideo"),
    ("Morocco Standard Time", "Africa/Casablanca"),
    ("Mountain Standard Time", "America/Denver"),
    ("Mountain Standard Time (Mexico)", "America/Mazatlan"),
    ("Myanmar Standard Time", "Asia/Rangoon"),
    ("N. Central Asia Standard Time", "Asia/Novosibirsk"),
    ("Namibia Standard Time", "Africa/Windhoek"),
    ("Nepal Standard Time", "Asia/Katmandu"),
    ("New Zealand Standard Time", "Pacific/Auckland"),
    ("Newfoundland Standard Time", "America/St_Johns"),
    ("Norfolk Standard Time", "Pacific/Norfolk"),
    ("North Asia East Standard Time", "Asia/Irkutsk"),
    ("North Asia Standard Time", "Asia/Krasnoyarsk"),
    ("North Korea Standard Time", "Asia/Pyongyang"),
    ("Omsk Standard Time", "Asia/Omsk"),
    ("Pacific SA Standard Time", "America/Santiago"),
    ("Pacific Standard Time", "America/Los_Angeles"),
    ("Pacific Standard Time (Mexico)", "America/Tijuana"),
    ("Pakistan Standard Time", "Asia/Karachi"),
    ("Paraguay Standard Time", "America/Asuncion"),
    ("Qyzylorda Standard Time", "Asia/Qyzylorda"),
    ("Romance Standard Time", "Europe/Paris"),
    ("Russia Time Zone 10", "Asia/Srednekolymsk"),
    ("Russia Time Zone 11", "Asia/Kamchatka"),
    ("Russia Time Zone 3", "Europe/Samara"),
    ("Russian Standard Time", "Europe/Moscow"),
    ("SA Eastern Standard Time", "America/Cayenne"),
    ("SA Pacific Standard Time", "America/Bogota"),
    ("SA Western Standard Time", "America/La_Paz"),
    ("Saint Pierre Standard Time", "America/Miquelon"),
    ("Sakhalin Standard Time", "Asia/Sakhalin"),
    ("Samoa Standard Time", "Pacific/Apia"),
    ("Sao Tome Standard Time", "Africa/Sao_Tome"),
    ("Saratov Standard Time", "Europe/Saratov"),
    ("SE Asia Standard Time", "Asia/Bangkok"),
    ("Singapore Standard Time", "Asia/Singapore"),
    ("South Africa Standard Time", "Africa/Johannesburg"),
    ("South Sudan Standard Time", "Africa/Juba"),
    ("Sri Lanka Standard Time", "Asia/Colombo"),
    ("Sudan Standard Time", "Africa/Khartoum"),
    ("Syria Standard Time", "Asia/Damascus"),
    ("Taipei Standard Time", "Asia/Taipei"),
    ("Tasmania Standard Time", "Australia/Hobart"),
    ("Tocantins Standard Time", "America/Araguaina"),
    ("Tokyo Standard Time", "Asia/Tokyo"),
    ("Tomsk Standard Time", "Asia/Tomsk"),
    ("Tonga Standard Time", "Pacific/Tongatapu"),
    ("Transbaikal Standard Time", "Asia/Chita"),
    ("Turkey Standard Time", "Europe/Istanbul"),
    ("Turks And Caicos Standard Time", "America/Grand_Turk"),
    ("Ulaanbaatar Standard Time", "Asia/Ulaanbaatar"),
    ("US Eastern Standard Time", "America/Indianapolis"),
    ("US Mountain Standard Time", "America/Phoenix"),
    ("UTC", "Etc/UTC"),
    ("UTC+12", "Etc/GMT-12"),
    ("UTC+13", "Etc/GMT-13"),
    ("UTC-02", "Etc/GMT+2"),
    ("UTC-08", "Etc/GMT+8"),
    ("UTC-09", "Etc/GMT+9"),
    ("UTC-11", "Etc/GMT+11"),
    ("Venezuela Standard Time", "America/Caracas"),
    ("Vladivostok Standard Time", "Asia/Vladivostok"),
    ("Volgograd Standard Time", "Europe/Volgograd"),
    ("W. Australia Standard Time", "Australia/Perth"),
    ("W. Central Africa Standard Time", "Africa/Lagos"),
    ("W. Europe Standard Time", "Europe/Berlin"),
    ("W. Mongolia Standard Time", "Asia/Hovd"),
    ("West Asia Standard Time", "Asia/Tashkent"),
    ("West Bank Standard Time", "Asia/Hebron"),
    ("West Pacific Standard Time", "Pacific/Port_Moresby"),
    ("Yakutsk Standard Time", "Asia/Yakutsk"),
    ("Yukon Standard Time", "America/Whitehorse"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_every_target_is_a_known_iana_zone() {
        for pair in WINDOWS_ZONES.windows(2) {
            assert_eq!(
                cmp_ignore_ascii_case(pair[0].0, pair[1].0),
                std::cmp::Ordering::Less,
                "{} must sort before {}",
                pair[0].0,
                pair[1].0
            );
        }
        for (win, iana) in WINDOWS_ZONES {
            assert!(iana.parse::<Tz>().is_ok(), "{win} maps to unknown {iana}");
        }
        assert_eq!(WINDOWS_ZONES.len(), 139);
    }

    #[test]
    fn resolves_iana_and_windows_ids() {
        assert_eq!(parse_time_zone("Asia/Shanghai"), Ok(Tz::Asia__Shanghai));
        assert_eq!(parse_time_zone("asia/shanghai"), Ok(Tz::Asia__Shanghai));
        assert_eq!(parse_time_zone("China Standard Time"), Ok(Tz::Asia__Shanghai));
        assert_eq!(parse_time_zone("eastern standard time"), Ok(Tz::America__New_York));
        assert_eq!(parse_time_zone("UTC"), Ok(Tz::UTC));
        assert_eq!(parse_time_zone("Dateline Standard Time"), Ok(Tz::Etc__GMTPlus12));
    }

    #[test]
    fn zone_tables_agree_with_chrono_tz() {
        use chrono::Utc;
        let mut entropy = crate::entropy::Entropy::from_seed(11);
        let zones = [
            Tz::America__New_York,
            Tz::Australia__Lord_Howe,
            Tz::Pacific__Apia,
            Tz::Africa__Casablanca,
            Tz::Asia__Shanghai,
        ];
        for tz in zones {
            let table = ZoneTable::of(&tz).expect("real zones have tables");
            for _ in 0..20_000 {
                let t = TABLE_FROM
                    + OFFSET_BOUND
                    + entropy.below((TABLE_UNTIL - TABLE_FROM - 2 * OFFSET_BOUND) as u64) as i64;
                let naive = DateTime::from_timestamp(t, 0).unwrap().naive_utc();
                let expected = i64::from(tz.offset_from_utc_datetime(&naive).fix().local_minus_utc());
                assert_eq!(table.offset_at(t), Some(expected), "{tz} at {t}");
                let mapped = match tz.from_local_datetime(&naive) {
                    LocalResult::None => LocalResult::None,
                    LocalResult::Single(x) => LocalResult::Single(x.with_timezone(&Utc).timestamp()),
                    LocalResult::Ambiguous(a, b) => {
                        let (a, b) = (a.with_timezone(&Utc).timestamp(), b.with_timezone(&Utc).timestamp());
                        LocalResult::Ambiguous(a.min(b), a.max(b))
                    }
                };
                assert_eq!(table.wall_to_utc(t), Some(mapped), "{tz} wall {t}");
            }
            // Around each change, second by second.
            for &change in table.transitions.iter().filter(|&&c| (0..2_000_000_000).contains(&c)).take(8) {
                for wall in (change - 3 * 3600..change + 3 * 3600).step_by(599) {
                    let naive = DateTime::from_timestamp(wall, 0).unwrap().naive_utc();
                    let single = matches!(tz.from_local_datetime(&naive), LocalResult::Single(_));
                    assert_eq!(matches!(table.wall_to_utc(wall), Some(LocalResult::Single(_))), single);
                }
            }
        }
        assert!(ZoneTable::of(&Tz::UTC).unwrap().transitions.is_empty());
        assert_eq!(ZoneTable::of(&Tz::UTC).unwrap().offset_at(TABLE_UNTIL), None);
    }

    #[test]
    fn unknown_ids_are_errors() {
        for id in ["", "Mars/Olympus", "Eastern", "China Standard"] {
            let err = parse_time_zone(id).unwrap_err();
            assert_eq!(err.id, id);
        }
    }
}
