//! Goal: the `sundial` binary runs a node end to end: it starts, runs the demo job on its
//! schedule, and stops gracefully on SIGTERM; bad options are refused with a clear message.
//!
//! Method: runs the real binary as a child process (real time, about six seconds).
#![cfg(all(feature = "node", unix))]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn the_binary_runs_the_demo_job_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sundial"))
        .arg("--demo")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let (lines, received) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut seen = Vec::new();
    let ran = loop {
        match received.recv_timeout(Duration::from_secs(15)) {
            Ok(line) => {
                let done = line.contains("demo job ran");
                seen.push(line);
                if done {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let status = child.wait().expect("the binary exits");
    while let Ok(line) = received.recv_timeout(Duration::from_secs(2)) {
        seen.push(line);
    }
    assert!(ran, "the demo job ran within 15 s:\n{}", seen.join("\n"));
    assert!(status.success(), "clean exit on SIGTERM: {status:?}\n{}", seen.join("\n"));
    assert!(seen.iter().any(|l| l.contains("stopped")), "{}", seen.join("\n"));
}

#[test]
fn bad_options_are_refused_with_the_key_named() {
    let output = Command::new(env!("CARGO_BIN_EXE_sundial"))
        .env("SUNDIAL_MAX_CONCURRENT_RUNS", "zero")
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("SUNDIAL_MAX_CONCURRENT_RUNS"), "{stderr}");
}
