//! Goal: `sundial-sim` keeps the interface people script against: the seed and its derived
//! options first, then a summary, and as the last line one JSON object per run (`seed`,
//! `nodes`, `simulated_seconds`, `fires`, `runs`, `violations`, `trace_hash`, `wall_ms`);
//! with `--seeds`, one such line per seed in seed order and a final summary line (`seeds`,
//! `failed_seeds`, `violations`). Exit status 0 when nothing was violated, 1 after each
//! violation is described, 2 with a reason for a bad flag.
//!
//! Method: the built binary, on short simulations.

use std::process::{Command, Stdio};

use serde_json::Value;

/// Runs the binary: (exit status, stdout, stderr).
fn sim(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_sundial-sim")).args(args).output().expect("the binary runs");
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("output is UTF-8");
    (output.status.code().unwrap_or(-1), text(output.stdout), text(output.stderr))
}

fn json(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
}

/// The JSON lines of a run's output, in order.
fn json_lines(out: &str) -> Vec<Value> {
    out.lines().filter(|l| l.starts_with('{')).map(json).collect()
}

#[test]
fn one_seed_prints_its_options_first_and_its_result_last() {
    let args = ["--seed", "3", "--duration", "10m", "--faults", "none"];
    let (status, out, err) = sim(&args);
    assert_eq!(status, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "seed 3");
    assert!(lines[1].starts_with("options: nodes=") && lines[1].contains("duration=600s"), "{}", lines[1]);
    assert!(lines.iter().any(|l| l.starts_with("summary: ")), "{out}");
    let last = json(lines.last().expect("output"));
    for field in ["seed", "nodes", "simulated_seconds", "fires", "runs", "violations", "trace_hash", "wall_ms"] {
        assert!(last.get(field).is_some(), "no '{field}' in {last}");
    }
    assert_eq!((last["seed"].as_u64(), last["violations"].as_u64()), (Some(3), Some(0)));
    assert!(last["runs"].as_u64() > Some(0), "{last}");
    let hash = last["trace_hash"].as_str().expect("a string");
    assert!(hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()), "{hash}");
    // Another process, the same trace.
    let (_, again, _) = sim(&args);
    assert_eq!(json(again.lines().last().expect("output"))["trace_hash"], last["trace_hash"]);
}

#[test]
fn a_seed_range_reports_each_seed_in_order_then_a_summary() {
    let (status, out, err) = sim(&["--seeds", "5..8", "--duration", "10m", "--threads", "2"]);
    assert_eq!(status, 0, "{out}{err}");
    let lines = json_lines(&out);
    let seeds: Vec<Option<u64>> = lines[..3].iter().map(|l| l["seed"].as_u64()).collect();
    assert_eq!(seeds, [Some(5), Some(6), Some(7)]);
    let summary = lines.last().expect("a summary");
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(summary["seeds"].as_u64(), Some(3));
    assert_eq!(summary["failed_seeds"], serde_json::json!([]));
    assert_eq!(summary["violations"].as_u64(), Some(0));
    assert_eq!(out.lines().last().map(json).as_ref(), Some(summary), "the summary is the last line");
}

#[test]
fn seed_ranges_reach_the_last_u64_and_need_no_list() {
    let (status, out, err) = sim(&["--seeds", "18446744073709551613..18446744073709551615", "--duration", "90s"]);
    assert_eq!(status, 0, "{out}{err}");
    let seeds: Vec<Option<u64>> = json_lines(&out).iter().map(|l| l["seed"].as_u64()).collect();
    assert_eq!(seeds, [Some(u64::MAX - 2), Some(u64::MAX - 1), None], "two seeds, then the summary");
    // A range nobody waits out starts at once: its seeds are walked, not listed first.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sundial-sim"))
        .args(["--seeds", "0..18446744073709551615", "--duration", "90s", "--faults", "none", "--threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary runs");
    let stdout = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let first = std::io::BufRead::lines(stdout).map_while(Result::ok).find(|line| line.starts_with('{'));
    child.kill().expect("it stops");
    child.wait().expect("it ends");
    assert_eq!(first.map(|line| json(&line)["seed"].as_u64()), Some(Some(0)));
}

#[test]
fn violations_are_described_and_fail_the_run() {
    // A store that skips fires as misfires a tenth of the threshold late: caught within a
    // handful of seeds.
    let (status, out, err) =
        sim(&["--seeds", "1..7", "--duration", "30m", "--broken-store", "early-misfire", "--threads", "2"]);
    assert_eq!(status, 1, "{out}{err}");
    let lines = json_lines(&out);
    let summary = lines.last().expect("a summary");
    let failed: Vec<u64> =
        summary["failed_seeds"].as_array().expect("a list").iter().filter_map(Value::as_u64).collect();
    assert!(!failed.is_empty(), "{summary}");
    for line in &lines[..lines.len() - 1] {
        let seed = line["seed"].as_u64().expect("a seed");
        let violations = line["violations"].as_u64().expect("a count");
        assert_eq!(failed.contains(&seed), violations > 0, "{line}");
    }
    let total: u64 = lines[..lines.len() - 1].iter().filter_map(|l| l["violations"].as_u64()).sum();
    assert_eq!(summary["violations"].as_u64(), Some(total));
    assert_eq!(
        out.lines().filter(|l| l.trim_start().starts_with("VIOLATION ")).count() as u64,
        total,
        "each described"
    );
}

#[test]
fn a_reader_that_goes_away_ends_the_run_quietly() {
    // `sundial-sim … | head`: the pipe closes before the report is written.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sundial-sim"))
        .args(["--seed", "1", "--duration", "90s", "--faults", "none"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("it ends");
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.stderr.is_empty(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn a_jobs_file_replaces_the_generated_jobs() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/jobs.toml");
    let (status, out, err) = sim(&["--seed", "4", "--duration", "10m", "--faults", "none", "--jobs-file", fixture]);
    assert_eq!(status, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[1].contains(" jobs=8 "), "{}", lines[1]);
    assert!(lines[2].starts_with("workload: 0 code jobs, 8 runtime jobs (the jobs file's), "), "{}", lines[2]);
    assert!(json(lines.last().expect("output"))["runs"].as_u64() > Some(0), "{out}");
    // A line per job of the file, in its order: what its runs came to.
    let start = lines.iter().position(|l| l.starts_with("jobs (runs by cause")).expect("the jobs' lines");
    let names: Vec<&str> = lines[start + 1..start + 9].iter().filter_map(|l| l.trim().split(':').next()).collect();
    assert_eq!(
        names,
        ["orders-sync", "report", "cache-warm", "per-node-cleanup", "quiet-hours", "one-offs", "by-hand", "billing"]
    );
    let every_minute = lines[start + 1];
    let fires: u64 = every_minute
        .split("fires ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(fires >= 20, "a fire a minute for 25 minutes: {every_minute}");
}

#[test]
fn a_jobs_file_it_cannot_simulate_is_refused_with_a_reason() {
    let dir = std::env::temp_dir().join(format!("sundial-sim-jobs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let write = |name: &str, text: &str| {
        let file = dir.join(name);
        std::fs::write(&file, text).expect("a temporary file");
        file.to_string_lossy().into_owned()
    };
    let job = |name: &str, schedule: &str| {
        format!(
            "[[jobs]]\nname = \"{name}\"\ntype = \"log\"\n[[jobs.triggers]]\nname = \"t\"\nschedule = \"{schedule}\"\n"
        )
    };
    let holidays = write("holidays.toml", &job("a", "cron 0 * * * * * calendar=holidays"));
    let twice = write("twice.toml", &format!("{}{}", job("a", "cron 0 * * * * *"), job("a", "cron 0 * * * * *")));
    let invalid = write("invalid.toml", &job("a", "cron 0 0 25 * * *"));
    let cases = [
        (holidays.as_str(), "job 'a' trigger 't': calendar 'holidays' is neither in the file nor the simulation's own (there are: quiet)"),
        (twice.as_str(), "twice.toml: jobs[1].name: job 'a' is also jobs[0]"),
        (invalid.as_str(), "invalid.toml: jobs[0] (a).triggers[0].schedule"),
        ("/no/such/jobs.toml", "/no/such/jobs.toml: cannot read"),
    ];
    for (file, reason) in cases {
        let (status, out, err) = sim(&["--seed", "1", "--jobs-file", file]);
        assert_eq!(status, 2, "{file}: {out}{err}");
        assert!(err.contains(reason), "{file}: {err}");
        assert!(out.is_empty(), "{file}: {out}");
    }
    let (status, _, err) = sim(&["--seed", "1", "--jobs", "3", "--jobs-file", &holidays]);
    assert_eq!(status, 2);
    assert!(err.contains("cannot be used with"), "{err}");
    std::fs::remove_dir_all(&dir).expect("removed");
}

#[test]
fn a_cron_mix_simulates_the_jobs_its_example_file_holds() {
    let mix = "1m=5,15m=20,1h=40,1d=35";
    let file = std::env::temp_dir().join(format!("sundial-sim-mix-{}.toml", std::process::id()));
    let jobs = sundial_simulations::cron_mix::cron_mix(mix).expect("a valid mix");
    std::fs::write(&file, sundial_simulations::cron_mix::to_toml(&jobs)).expect("a temporary file");
    let common = ["--seed", "6", "--nodes", "3", "--duration", "20m", "--faults", "none"];
    let (status, out, err) = sim(&[&common[..], &["--cron-mix", mix]].concat());
    assert_eq!(status, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[2].starts_with(&format!("workload: 0 code jobs, 100 runtime jobs (the cron mix {mix}), ")), "{out}");
    let summary = lines.iter().find(|l| l.starts_with("jobs: ")).expect("one line for the jobs");
    assert!(summary.starts_with("jobs: 100 of the cron mix; the latest a fire started after its time: "), "{summary}");
    let from_file = sim(&[&common[..], &["--jobs-file", &file.to_string_lossy()]].concat());
    std::fs::remove_file(&file).expect("removed");
    assert_eq!(from_file.0, 0, "{}{}", from_file.1, from_file.2);
    let (ours, theirs) = (json(lines.last().expect("output")), json(from_file.1.lines().last().expect("output")));
    assert!(ours["fires"].as_u64() > Some(100), "{ours}");
    assert_eq!(ours["trace_hash"], theirs["trace_hash"], "the same jobs, the same day");

    for (args, reason) in [
        (&["--seed", "1", "--cron-mix", "1h"][..], "--cron-mix: '1h' is not cadence=count"),
        (&["--seed", "1", "--cron-mix", "2h=3"][..], "--cron-mix: unknown cadence '2h'"),
        (&["--seed", "1", "--cron-mix", "1m=0"][..], "--cron-mix: '1m=0' asks for no jobs"),
        (&["--seed", "1", "--cron-mix", "1h=3", "--jobs", "3"][..], "cannot be used with"),
    ] {
        let (status, out, err) = sim(args);
        assert_eq!(status, 2, "{args:?}: {out}{err}");
        assert!(err.contains(reason), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
}

#[test]
fn bad_flags_are_refused_with_a_reason() {
    let cases: [(&[&str], &str); 8] = [
        (&["--seed", "1", "--nodes", "0"], "0 is not in 1..=64"),
        (&["--seed", "one"], "invalid digit"),
        (&["--seeds", "9..3"], "is empty"),
        (&["--seed", "1", "--duration", "31d"], "longer than 30 days"),
        (&["--seed", "1", "--faults", "bogus"], "unknown fault 'bogus'"),
        (&["--nodes", "3"], "--seed"),
        (&["--seed", "1", "--memory-floor", "0"], "use off for no guard"),
        (&["--seed", "1", "--memory-floor", "95%"], "1% to 90%"),
    ];
    for (args, reason) in cases {
        let (status, out, err) = sim(args);
        assert_eq!(status, 2, "{args:?}: {out}{err}");
        assert!(err.contains(reason), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
}

#[test]
fn a_machine_short_of_memory_stops_the_run_with_the_reason() {
    if std::fs::read_to_string("/proc/meminfo").map_or(true, |text| !text.contains("MemAvailable:")) {
        return; // No guard where the machine's memory cannot be read.
    }
    // A floor above any machine's memory: the guard refuses before simulating anything.
    let (status, out, err) = sim(&["--seed", "1", "--duration", "10m", "--memory-floor", "1000T"]);
    assert_eq!(status, 2, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("below the floor of") && err.contains("--duration"), "{err}");
    // Without the guard the same run runs.
    let (status, out, err) = sim(&["--seed", "1", "--duration", "10m", "--memory-floor", "off"]);
    assert_eq!(status, 0, "{out}{err}");
    assert_eq!(json(out.lines().last().unwrap_or_default())["violations"], 0);
}
