//! Process trees on Linux, through `/proc`: the children of a multi-threaded process, and
//! killing a process with everything it started as a machine crash would.

// Test support waits in real time: the processes it drives run on it.
#![allow(clippy::disallowed_methods)]

use std::process::Command;
use std::time::{Duration, Instant};

/// The child processes of `pid`, whichever of its threads started them.
///
/// `/proc/<pid>/task/<tid>/children` lists the children of one thread only: a node starts
/// its jobs' processes from its runtime's worker threads, so reading the main thread's
/// file alone misses them. The list is exact only while `pid` is stopped.
pub fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
    }
    children.sort_unstable();
    children.dedup();
    children
}

/// Sends `signal` (a name such as `KILL`) to `pid`; whether it was delivered.
pub fn signal(pid: i32, signal: &str) -> bool {
    Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().is_ok_and(|s| s.success())
}

/// Kills `pid` and every process it started, at one moment: each process of the tree is
/// stopped (SIGSTOP) and seen stopped before its children are listed, so none can start
/// another behind the walk; then all are killed (SIGKILL). Returns the pids killed, `pid`
/// first.
pub fn kill_tree(pid: i32) -> Vec<i32> {
    let mut doomed = vec![pid];
    let mut i = 0;
    while i < doomed.len() {
        let p = doomed[i];
        if signal(p, "STOP") {
            wait_stopped(p);
            doomed.extend(children(p));
        }
        i += 1;
    }
    for p in &doomed {
        signal(*p, "KILL");
    }
    doomed
}

/// Waits (up to a second) until every thread of `pid` is stopped or gone: a stop signal
/// is delivered asynchronously, and a thread in the middle of a fork finishes it first.
fn wait_stopped(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
        let running = tasks.flatten().any(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // The state is the first field after the command's closing parenthesis.
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, None | Some("T" | "t" | "Z" | "X"))
        });
        if !running {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_started_from_threads_dies_whole() {
        // A shell and the two sleeps it started.
        let mut shell = Command::new("sh").arg("-c").arg("sleep 30 & sleep 30 & wait").spawn().unwrap();
        let pid = shell.id() as i32;
        std::thread::sleep(Duration::from_millis(200));
        let killed = kill_tree(pid);
        assert_eq!(killed[0], pid);
        assert_eq!(killed.len(), 3, "the shell and its two sleeps: {killed:?}");
        let _ = shell.wait();
        for p in &killed[1..] {
            // Reparented and reaped by init, or a zombie: not running. SIGKILL is delivered
            // asynchronously, so a busy machine may show the process exiting for a moment.
            let deadline = Instant::now() + Duration::from_secs(5);
            let stat = loop {
                let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                if stat.is_empty() || stat.contains(") Z") || Instant::now() >= deadline {
                    break stat;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            assert!(stat.is_empty() || stat.contains(") Z"), "{p} still runs: {stat}");
        }
    }

    #[test]
    fn children_started_by_another_thread_are_listed() {
        let pid = std::process::id() as i32;
        let child = std::thread::spawn(|| Command::new("sleep").arg("5").spawn().unwrap()).join().unwrap();
        let listed = children(pid);
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        assert!(listed.contains(&(child.id() as i32)), "{listed:?} lacks {}", child.id());
    }
}
