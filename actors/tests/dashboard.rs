//! Goal: the dashboard a node serves works for a person in a real browser: it asks for a
//! token when the API does and refuses a wrong one, shows every page, filters jobs and
//! runs, triggers a job and shows its run appear without a reload, pauses and resumes,
//! cancels a running run, refuses a change to a read token with the API's error, speaks
//! Chinese to a browser that prefers it, and is readable at 1280×800 and on a phone.
//!
//! Method: a real `sundial` node process (its admin API on loopback, two tokens) and
//! Debian's headless Chromium driven through chromedriver (`sundial_test_support::browser`).
//! Screenshots of each page at both widths go to `target/dashboard-screenshots/`, or,
//! with `SUNDIAL_UPDATE_SCREENSHOTS=1`, to `docs/screenshots/` (which the README shows).
#![cfg(feature = "node")]
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use sundial_test_support::browser::Browser;
use sundial_test_support::dir::TempDir;
use sundial_test_support::node_process::{http, NodeProcess};

const BIN: &str = env!("CARGO_BIN_EXE_sundial");
const ADMIN: &str = "admin-token-0123456789";
const READ: &str = "read-token-0123456789";

const CONFIG: &str = r#"
[scheduler]
poll_interval_seconds = 1

[admin]
[[admin.tokens]]
name = "ops"
role = "admin"
value = "admin-token-0123456789"
[[admin.tokens]]
name = "wallboard"
role = "read"
value = "read-token-0123456789"

[[jobs]]
name = "reports"
type = "log"
description = "The morning reports"
data = { message = "reports ready" }
[[jobs.triggers]]
name = "mornings"
schedule = "cron 0 0 9 * * MON-FRI tz=Asia/Shanghai"

[[jobs]]
name = "heartbeat"
type = "log"
data = { message = "tick" }
[[jobs.triggers]]
name = "every-second"
schedule = "cron * * * * * *"

[[jobs]]
name = "sleeper"
type = "shell"
data = { program = "sleep", args = ["60"] }

[[jobs]]
name = "broken"
type = "shell"
data = { program = "sh", args = ["-c", "echo out of paper >&2; exit 3"] }
"#;

fn screenshots() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned();
    if std::env::var("SUNDIAL_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        root.join("docs").join("screenshots")
    } else {
        root.join("target").join("dashboard-screenshots")
    }
}

/// `text` with every run of white space one space.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Signs in on the page shown with `token`.
async fn sign_in(browser: &Browser, token: &str) {
    let input = browser.find("#token").await;
    input.send_keys(token).await.unwrap();
    browser.click_labelled("Sign in").await;
}

async fn sign_out(browser: &Browser) {
    browser.find("#logout").await.click().await.unwrap();
    browser.wait_for_text("Sign in").await;
}

/// The table rows' text on the page.
async fn rows(browser: &Browser) -> Vec<String> {
    let text = browser.run("return [...document.querySelectorAll('tbody tr')].map(r => r.innerText)").await;
    text.as_array().unwrap().iter().map(|v| v.as_str().unwrap_or_default().to_owned()).collect()
}

/// Waits until some table row contains every one of `needles`; the rows then.
async fn wait_for_row(browser: &Browser, needles: &[&str]) -> Vec<String> {
    let deadline = std::time::Instant::now() + sundial_test_support::browser::WAIT;
    loop {
        let rows = rows(browser).await;
        if rows.iter().any(|r| needles.iter().all(|n| r.contains(n))) {
            return rows;
        }
        assert!(std::time::Instant::now() < deadline, "no row with {needles:?}:\n{}", rows.join("\n"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn toast(browser: &Browser) -> String {
    let deadline = std::time::Instant::now() + sundial_test_support::browser::WAIT;
    loop {
        let text = browser
            .run("const t = document.querySelector('#toast'); return t.classList.contains('shown') ? t.innerText : ''")
            .await;
        let text = text.as_str().unwrap_or_default().to_owned();
        if !text.is_empty() {
            // Hide it, so the next action's result is read, not this one.
            browser.run("document.querySelector('#toast').className = ''").await;
            return text;
        }
        assert!(std::time::Instant::now() < deadline, "no result was reported");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Screenshots of the page at `url` at a desktop's and a phone's width.
async fn shoot(browser: &Browser, url: &str, name: &str, ready: &str) {
    for (width, height, label) in [(1280, 800, "desktop"), (390, 844, "phone")] {
        browser.set_viewport(width, height).await;
        browser.open(url).await;
        browser.wait_for_text(ready).await;
        // Settled: a refresh has drawn the data.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let overflow = browser.run("return document.documentElement.scrollWidth - window.innerWidth").await;
        assert!(overflow.as_i64().unwrap_or(0) <= 1, "{name} at {width}px is wider than the window by {overflow}px");
        browser.screenshot(&screenshots().join(format!("{name}-{label}.png"))).await;
    }
    browser.set_viewport(1280, 800).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_is_driven_in_a_real_browser() {
    let Some(browser) = Browser::start(1280, 800, "en-US").await else { return };
    let dir = TempDir::new("dashboard");
    let config = dir.path().join("sundial.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let mut node = NodeProcess::start(Path::new(BIN), &["--config", config.to_str().unwrap()], &[]).with_token(ADMIN);
    node.wait_for("code jobs written to the store", Duration::from_secs(20));
    let base = node.base.clone();
    let port = node.port();

    // The page is served to anyone; its data is not.
    let (status, page) = http(port, "GET", "/", None, None);
    assert_eq!(status, 200);
    assert!(page.contains("/assets/app.js") && !page.contains("reports"), "{page}");
    assert_eq!(http(port, "GET", "/api/overview", None, None).0, 401);
    assert_eq!(http(port, "GET", "/assets/nothing.js", None, None).0, 404);

    // Without a token: the sign-in form, and nothing of the node's data.
    browser.open(&format!("{base}/")).await;
    let text = browser.wait_for_text("This node asks for a token").await;
    assert!(!text.contains("heartbeat") && !text.contains("Sign out"), "{text}");
    sign_in(&browser, "not-a-token").await;
    browser.wait_for_text("That token was refused.").await;

    // A read token reads everything.
    sign_in(&browser, READ).await;
    let text = browser.wait_for_text("Runs in the last hour").await;
    assert!(text.contains("Leader") && text.contains("Store") && text.contains("Needs attention"), "{text}");
    let node_id = node.cli_json(&["node", "info"])["node_id"].as_str().unwrap().to_owned();
    browser.wait_for_text(&node_id).await;
    // The charts fill as the heartbeat job runs, and the page redraws without a reload.
    browser.run("window.stillThisPage = true").await;
    browser.find("figure.chart svg rect").await;
    assert_eq!(browser.run("return window.stillThisPage === true").await, true, "the page was reloaded");

    // Jobs: search and filters.
    browser.click_labelled("Jobs").await;
    wait_for_row(&browser, &["heartbeat"]).await;
    // Times in the browser's zone, UTC on hover.
    let title = browser.run("const t = document.querySelector('time[title]'); return t ? t.title : ''").await;
    assert!(title.as_str().unwrap_or_default().starts_with("UTC "), "{title}");
    let search = browser.find("input[name=q]").await;
    search.send_keys("rep").await.unwrap();
    browser.wait_until("only the reports job", |t| t.contains("reports") && !t.contains("heartbeat")).await;
    // Emptied as a person does: the field's own input event.
    search.send_keys(&"\u{e003}".repeat(3)).await.unwrap();
    browser.run("const s = document.querySelector('select[name=state]'); s.value = 'paused'; s.dispatchEvent(new Event('change'))").await;
    browser.wait_for_text("No job matches.").await;
    browser.run("const s = document.querySelector('select[name=state]'); s.value = ''; s.dispatchEvent(new Event('change'))").await;
    wait_for_row(&browser, &["sleeper", "shell"]).await;

    // A job's page says its schedule in words; a read token may not change it.
    browser.open(&format!("{base}/#/jobs/reports")).await;
    browser.wait_for_text("every weekday at 09:00 Asia/Shanghai").await;
    browser.click_labelled("Pause").await;
    browser.confirm().await;
    let refused = toast(&browser).await;
    assert!(refused.contains("ADMIN_AUTH_002"), "{refused}");

    // An admin token changes things.
    sign_out(&browser).await;
    sign_in(&browser, ADMIN).await;
    browser.open(&format!("{base}/#/jobs/reports")).await;
    browser.wait_for_text("every weekday at 09:00 Asia/Shanghai").await;
    // A confirmation can be turned down with the keyboard: nothing happens.
    browser.click_labelled("Pause").await;
    browser.find("dialog[open]").await.send_keys("\u{e00c}").await.unwrap();
    assert_eq!(browser.run("return document.querySelector('#confirm').open").await, false);
    assert_eq!(node.cli_json(&["jobs", "show", "reports"])["paused"], false);
    browser.click_labelled("Pause").await;
    browser.confirm().await;
    assert!(toast(&browser).await.contains("Pause reports"));
    browser.wait_until("the job paused", |t| words(t).contains("reports paused Trigger now")).await;
    assert_eq!(node.cli_json(&["jobs", "show", "reports"])["paused"], true);
    browser.click_labelled("Resume").await;
    browser.confirm().await;
    toast(&browser).await;
    browser.wait_until("the job resumed", |t| words(t).contains("reports scheduled Trigger now")).await;
    // One trigger paused and resumed.
    wait_for_row(&browser, &["mornings", "waiting"]).await;
    browser.run("document.querySelector('tbody tr button').click()").await;
    browser.confirm().await;
    toast(&browser).await;
    wait_for_row(&browser, &["mornings", "paused"]).await;
    browser.run("document.querySelector('tbody tr button').click()").await;
    browser.confirm().await;
    toast(&browser).await;
    wait_for_row(&browser, &["mornings", "waiting"]).await;

    // Trigger a job: its run appears without a reload, and the result is reported.
    browser.open(&format!("{base}/#/jobs/broken")).await;
    browser.wait_for_text("Recent runs").await;
    browser.wait_for_text("No run matches.").await;
    browser.run("window.stillThisPage = true").await;
    browser.click_labelled("Trigger now").await;
    browser.confirm().await;
    let result = toast(&browser).await;
    assert!(result.contains("Run of broken ended: failed") && result.contains("out of paper"), "{result}");
    wait_for_row(&browser, &["broken", "failed"]).await;
    assert_eq!(browser.run("return window.stillThisPage === true").await, true, "the page was reloaded");

    // Enqueue a long job, find its run among the runs, cancel it from its page.
    browser.open(&format!("{base}/#/jobs/sleeper")).await;
    browser.click_labelled("Enqueue").await;
    browser.confirm().await;
    assert!(toast(&browser).await.contains("Queued sleeper"));
    browser.open(&format!("{base}/#/runs")).await;
    // Runs made in the same minute tell apart by the ids shown.
    wait_for_row(&browser, &["heartbeat", "succeeded"]).await;
    let shown = browser.run("return [...document.querySelectorAll('tbody tr a.mono')].map(a => a.textContent)").await;
    let shown: Vec<&str> = shown.as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    let distinct: std::collections::BTreeSet<&&str> = shown.iter().collect();
    assert!(shown.len() >= 2 && distinct.len() == shown.len(), "{shown:?}");
    let job = browser.find("form.filters input[name=job]").await;
    job.send_keys("sleeper").await.unwrap();
    browser.run("document.querySelector('form.filters select[name=state]').value = 'running'").await;
    browser.click_labelled("Apply").await;
    wait_for_row(&browser, &["sleeper", "running"]).await;
    assert!(!rows(&browser).await.iter().any(|r| r.contains("heartbeat")), "filtered by job");
    browser.run("document.querySelector('tbody tr a').click()").await;
    browser.wait_for_text("still running").await;
    let run_page = browser.client.current_url().await.unwrap();
    shoot(&browser, run_page.as_ref(), "run", "still running").await;
    browser.click_labelled("Cancel run").await;
    browser.confirm().await;
    toast(&browser).await;
    browser.wait_until("the run canceled", |t| t.contains("canceled")).await;

    // A code job changed at run time gets its code definition back.
    let changed = r#"{"name": "reports", "type": "log", "data": {"message": "reports ready"},
        "triggers": [{"name": "mornings", "schedule": "cron 0 30 9 * * MON-FRI tz=Asia/Shanghai"}]}"#;
    let (status, body) = http(port, "PUT", "/api/jobs/reports", Some(ADMIN), Some(changed));
    assert_eq!(status, 200, "{body}");
    browser.open(&format!("{base}/#/jobs/reports")).await;
    browser.wait_for_text("every weekday at 09:30 Asia/Shanghai").await;
    browser.click_labelled("Restore code definition").await;
    browser.confirm().await;
    assert!(toast(&browser).await.contains("Restore code definition reports"));
    browser.wait_for_text("every weekday at 09:00 Asia/Shanghai").await;
    assert_eq!(node.cli_json(&["jobs", "show", "reports"])["origin"], "Code");
    // A job is deleted, and the list no longer holds it.
    browser.open(&format!("{base}/#/jobs/broken")).await;
    browser.wait_for_text("Recent runs").await;
    browser.click_labelled("Delete").await;
    browser.confirm().await;
    assert!(toast(&browser).await.contains("Delete broken"));
    wait_for_row(&browser, &["heartbeat"]).await;
    assert!(!rows(&browser).await.iter().any(|r| r.contains("broken")), "deleted");
    assert_eq!(http(port, "GET", "/api/jobs/broken", Some(ADMIN), None).0, 404);

    // Nodes and the cluster.
    browser.click_labelled("Nodes").await;
    let text = browser.wait_for_text("Run slots in use on this node").await;
    assert!(text.contains(&node_id) && text.contains("leads") && text.contains("/ 32"), "{text}");

    // Every page at both widths.
    shoot(&browser, &format!("{base}/#/"), "overview", "Runs in the last hour").await;
    shoot(&browser, &format!("{base}/#/jobs"), "jobs", "heartbeat").await;
    shoot(&browser, &format!("{base}/#/jobs/reports"), "job", "every weekday").await;
    shoot(&browser, &format!("{base}/#/runs"), "runs", "heartbeat").await;
    shoot(&browser, &format!("{base}/#/nodes"), "nodes", "Run slots in use").await;
    browser.close().await;

    // A browser preferring Chinese gets Chinese labels and messages.
    let Some(chinese) = Browser::start(1280, 800, "zh-CN").await else { return };
    chinese.open(&format!("{base}/")).await;
    chinese.wait_for_text("此节点需要令牌").await;
    sign_in_zh(&chinese, ADMIN).await;
    let text = chinese.wait_for_text("最近一小时的运行").await;
    assert!(text.contains("概览") && text.contains("主节点"), "{text}");
    chinese.open(&format!("{base}/#/jobs/reports")).await;
    chinese.wait_for_text("每个工作日 09:00（Asia/Shanghai）").await;
    shoot(&chinese, &format!("{base}/#/"), "overview-zh", "最近一小时的运行").await;
    chinese.close().await;
    node.terminate();
}

async fn sign_in_zh(browser: &Browser, token: &str) {
    browser.find("#token").await.send_keys(token).await.unwrap();
    browser.click_labelled("登录").await;
}

/// A node without tokens on loopback asks for none, as its API does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_node_without_tokens_shows_the_dashboard_at_once() {
    let Some(browser) = Browser::start(1280, 800, "en-US").await else { return };
    let mut node = NodeProcess::start(Path::new(BIN), &["--demo"], &[]);
    node.wait_for("code jobs written to the store", Duration::from_secs(20));
    browser.open(&format!("{}/", node.base)).await;
    let text = browser.wait_for_text("Runs in the last hour").await;
    assert!(!text.contains("Sign in") && !text.contains("Sign out"), "no token to give or forget: {text}");
    browser.click_labelled("Jobs").await;
    browser.find("tbody tr").await;
    browser.close().await;
    node.terminate();
}
