//! The memory guard's rules: when a simulation must stop because the machine is running
//! out of memory, and what it then tells the user.
//!
//! The checkers keep every run's history (about 2.3 KB per run), so a long or busy
//! simulation can outgrow the machine: 1,000 generated jobs take about 6 GB a simulated
//! day. Without a guard the kernel swaps, then kills the process with no word of why. The
//! `sundial-sim` binary reads the machine's memory now and then (Linux's `/proc`; nothing
//! here reads it, and no simulation sees it) and stops with [`shortage_message`] when the
//! memory still available falls below the floor. What the guard reads never reaches a
//! simulation, so it cannot change a trace.

/// The default floor's least size: 256 MiB.
const DEFAULT_FLOOR_MIN: u64 = 256 << 20;
/// The default floor's share of the machine's memory, in per cent.
const DEFAULT_FLOOR_PERCENT: u64 = 2;

/// What the machine's memory looks like (Linux: `/proc/meminfo`), in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    /// All of the machine's memory (`MemTotal`).
    pub total: u64,
    /// What new allocations can still get without swapping (`MemAvailable`).
    pub available: u64,
}

/// Reads `MemTotal` and `MemAvailable` from the text of `/proc/meminfo` (values in kB);
/// `None` when either is missing or unreadable (an old kernel, another system).
pub fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let kilobytes: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
            kilobytes.checked_mul(1024)
        })
    };
    Some(MemInfo { total: field("MemTotal")?, available: field("MemAvailable")? })
}

/// This process's resident memory in bytes, from the text of `/proc/self/status`
/// (`VmRSS`, in kB); `None` when it is not there.
pub fn parse_resident(status: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let kilobytes: u64 = line.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse().ok()?;
        kilobytes.checked_mul(1024)
    })
}

/// How little available memory stops a simulation (`--memory-floor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryFloor {
    /// 2 % of the machine's memory, at least 256 MiB.
    #[default]
    Default,
    /// This many bytes.
    Bytes(u64),
    /// This share of the machine's memory, in per cent (1 to 90).
    Percent(u8),
    /// No guard: the simulation runs until it ends or the system stops it.
    Off,
}

impl MemoryFloor {
    /// Parses `off`, a size (`512M`, `2G`, `300000K`; a plain number is bytes) or a share
    /// of the machine's memory (`5%`, 1 to 90).
    ///
    /// # Errors
    /// Anything else, or a size of 0 (say `off`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") {
            return Ok(Self::Off);
        }
        if let Some(number) = text.strip_suffix('%') {
            return match number.trim().parse::<u8>() {
                Ok(percent @ 1..=90) => Ok(Self::Percent(percent)),
                _ => Err(format!("memory floor '{text}': a share is 1% to 90%")),
            };
        }
        let (number, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
            Some((at, _)) => text.split_at(at),
            None => (text, ""),
        };
        let shift = match unit.to_ascii_uppercase().as_str() {
            "" | "B" => 0,
            "K" | "KB" | "KIB" => 10,
            "M" | "MB" | "MIB" => 20,
            "G" | "GB" | "GIB" => 30,
            "T" | "TB" | "TIB" => 40,
            _ => {
                return Err(format!(
                    "memory floor '{text}': expected off, a size such as 512M or 2G, or a share such as 5%"
                ))
            }
        };
        let bytes = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(1 << shift))
            .ok_or_else(|| format!("memory floor '{text}': expected a whole number before the unit"))?;
        if bytes == 0 {
            return Err(format!("memory floor '{text}': must be more than 0 (use off for no guard)"));
        }
        Ok(Self::Bytes(bytes))
    }

    /// The floor in bytes on a machine with `total` bytes of memory; `None` when off.
    pub fn bytes(self, total: u64) -> Option<u64> {
        match self {
            Self::Default => Some(share(total, DEFAULT_FLOOR_PERCENT).max(DEFAULT_FLOOR_MIN)),
            Self::Bytes(bytes) => Some(bytes),
            Self::Percent(percent) => Some(share(total, u64::from(percent))),
            Self::Off => None,
        }
    }
}

/// `percent` per cent of `bytes` (at most 90, so it fits).
fn share(bytes: u64, percent: u64) -> u64 {
    u64::try_from(u128::from(bytes) * u128::from(percent) / 100).unwrap_or(u64::MAX)
}

/// The floor (bytes) when the machine's available memory is below it, else `None`: the
/// guard's one decision.
pub fn below_floor(info: MemInfo, floor: MemoryFloor) -> Option<u64> {
    floor.bytes(info.total).filter(|&floor| info.available < floor)
}

/// What the binary prints when it stops for lack of memory: the numbers, why a simulation
/// uses that much, and what to change. `resident` is this process's own memory, when known.
pub fn shortage_message(info: MemInfo, floor: u64, resident: Option<u64>) -> String {
    let held = resident.map(|bytes| format!(", and this process holds {}", size(bytes))).unwrap_or_default();
    format!(
        "stopping: the machine has {} of its {} available, below the floor of {}{held}. The \
         checkers keep every run's history, about 2.3 KB per run, so a long or busy simulation \
         outgrows memory: shorten --duration, lower --jobs, run fewer seeds at once (--threads), \
         or set --memory-floor (off: no guard). Reports printed above are complete; seeds not \
         reported did not finish.",
        size(info.available),
        size(info.total),
        size(floor),
    )
}

/// `bytes` in MiB, or GiB with one decimal from 10 GiB on.
fn size(bytes: u64) -> String {
    let mib = bytes >> 20;
    if mib >= 10 << 10 {
        format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
    } else {
        format!("{mib} MiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       24573264 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\nBuffers:          10 kB\n";

    #[test]
    fn meminfo_and_status_are_read_in_bytes() {
        let info = parse_meminfo(MEMINFO).expect("both fields");
        assert_eq!(info, MemInfo { total: 24_573_264 * 1024, available: 20_000_000 * 1024 });
        assert_eq!(parse_meminfo("MemTotal: 10 kB\n"), None, "no MemAvailable");
        assert_eq!(parse_meminfo("MemTotal: x kB\nMemAvailable: 5 kB\n"), None);
        // A field whose name only starts like another's is not it.
        assert_eq!(parse_meminfo("MemTotalX: 1 kB\nMemTotal: 2 kB\nMemAvailable: 1 kB\n").map(|i| i.total), Some(2048));
        assert_eq!(parse_resident("Name:\tsim\nVmRSS:\t  123456 kB\nThreads: 3\n"), Some(123_456 * 1024));
        assert_eq!(parse_resident("Name:\tsim\n"), None);
    }

    #[test]
    fn floors_parse_and_scale_with_the_machine() {
        assert_eq!(MemoryFloor::parse("off"), Ok(MemoryFloor::Off));
        assert_eq!(MemoryFloor::parse("512M"), Ok(MemoryFloor::Bytes(512 << 20)));
        assert_eq!(MemoryFloor::parse("2g"), Ok(MemoryFloor::Bytes(2 << 30)));
        assert_eq!(MemoryFloor::parse("300000KiB"), Ok(MemoryFloor::Bytes(300_000 << 10)));
        assert_eq!(MemoryFloor::parse("4096"), Ok(MemoryFloor::Bytes(4096)));
        assert_eq!(MemoryFloor::parse("5%"), Ok(MemoryFloor::Percent(5)));
        for bad in ["0", "0G", "", "M", "1.5G", "-1G", "2X", "0%", "91%", "x%", "99999999999999999999G", "16777216T"] {
            assert!(MemoryFloor::parse(bad).is_err(), "{bad:?} must be refused");
        }
        let gib = 1u64 << 30;
        assert_eq!(MemoryFloor::Default.bytes(24 * gib), Some(24 * gib * 2 / 100));
        assert_eq!(MemoryFloor::Default.bytes(4 * gib), Some(256 << 20), "at least 256 MiB");
        assert_eq!(MemoryFloor::Percent(10).bytes(20 * gib), Some(2 * gib));
        assert_eq!(MemoryFloor::Off.bytes(20 * gib), None);
    }

    #[test]
    fn the_guard_stops_only_below_its_floor() {
        let gib = 1u64 << 30;
        let info = |available| MemInfo { total: 16 * gib, available };
        assert_eq!(below_floor(info(gib), MemoryFloor::Default), None);
        let floor = 16 * gib * 2 / 100;
        assert_eq!(below_floor(info(floor - 1), MemoryFloor::Default), Some(floor));
        assert_eq!(below_floor(info(floor), MemoryFloor::Default), None);
        assert_eq!(below_floor(info(0), MemoryFloor::Off), None);
        assert_eq!(below_floor(info(gib), MemoryFloor::Bytes(2 * gib)), Some(2 * gib));
    }

    #[test]
    fn the_message_gives_the_numbers_and_the_remedies() {
        let gib = 1u64 << 30;
        let message = shortage_message(MemInfo { total: 24 * gib, available: 300 << 20 }, 491 << 20, Some(23 * gib));
        for part in
            ["300 MiB of its 24.0 GiB", "floor of 491 MiB", "holds 23.0 GiB", "--duration", "--jobs", "--threads"]
        {
            assert!(message.contains(part), "{part:?} missing from {message}");
        }
        assert!(!shortage_message(MemInfo { total: gib, available: 1 }, 2, None).contains("holds"));
    }
}
