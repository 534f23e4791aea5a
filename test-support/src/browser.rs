//! A real browser for tests: Debian's `chromium`, headless, driven through WebDriver by
//! `chromedriver` (package `chromium-driver`), started per test on a port of its own and
//! stopped when dropped. Without them the test is skipped, except under `CI=true`, where a
//! test of a real component must never pass by skipping: it panics.
// Waits on a real browser run on the real clock.
#![allow(clippy::disallowed_methods)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};

/// Where Debian puts the browser and its driver.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long [`Browser::find`], [`Browser::wait_for_text`] and the like wait.
pub const WAIT: Duration = Duration::from_secs(15);

/// A headless Chromium session.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    profile: PathBuf,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(9515)
}

impl Browser {
    /// A browser window of `width`×`height` preferring `language` (e.g. `en-US`,
    /// `zh-CN`); `None` (the test is skipped) when Chromium or its driver is not installed
    /// and `CI` is not `true`.
    ///
    /// # Panics
    /// When they are installed but do not start, or under `CI=true` when they are missing.
    pub async fn start(width: u32, height: u32, language: &str) -> Option<Browser> {
        if !(Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists()) {
            assert!(
                !crate::postgres::in_ci(),
                "chromium and chromedriver are not installed (CI=true: .ci/run must install Debian's chromium and \
                 chromium-driver)"
            );
            println!("skipped: chromium or chromedriver is not installed (apt-get install chromium chromium-driver)");
            return None;
        }
        let port = free_port();
        let profile = std::env::temp_dir().join(format!("sundial-chromium-{}-{port}", std::process::id()));
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {CHROMEDRIVER}: {e}"));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            serde_json::json!({
                "binary": CHROMIUM,
                "args": [
                    "--headless=new",
                    // Root in CI: Chromium's sandbox refuses to run as root.
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--hide-scrollbars",
                    format!("--window-size={width},{height}"),
                    format!("--lang={language}"),
                    format!("--user-data-dir={}", profile.display()),
                ],
                "prefs": { "intl.accept_languages": language },
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + WAIT;
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector).capabilities(capabilities.clone()).connect(&url).await {
                Ok(client) => break client,
                Err(error) => {
                    assert!(Instant::now() < deadline, "chromedriver on port {port} gave no session: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let browser = Browser { client, driver, profile };
        // The window holds the page at the size asked for (the viewport, not the frame).
        browser.set_viewport(width, height).await;
        Some(browser)
    }

    /// Resizes the window so the page gets `width`×`height`.
    pub async fn set_viewport(&self, width: u32, height: u32) {
        self.client.set_window_size(width, height).await.unwrap();
        let inner = self.client.execute("return [window.innerWidth, window.innerHeight]", vec![]).await.unwrap();
        let (w, h) = (inner[0].as_u64().unwrap_or(0) as u32, inner[1].as_u64().unwrap_or(0) as u32);
        if (w, h) != (width, height) {
            let (dw, dh) = (width.saturating_sub(w), height.saturating_sub(h));
            self.client.set_window_size(width + dw, height + dh).await.unwrap();
        }
    }

    /// Opens `url`.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
    }

    /// The first element matching the CSS `selector`, waiting for it.
    pub async fn find(&self, selector: &str) -> Element {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(selector))
            .await
            .unwrap_or_else(|e| panic!("no {selector} within {WAIT:?}: {e}"))
    }

    /// The page's visible text.
    pub async fn text(&self) -> String {
        match self.client.find(Locator::Css("body")).await {
            Ok(body) => body.text().await.unwrap_or_default(),
            Err(e) => format!("(no body: {e})"),
        }
    }

    /// Waits until the page's visible text contains `needle`; the text then.
    pub async fn wait_for_text(&self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = self.text().await;
            if text.contains(needle) {
                return text;
            }
            assert!(Instant::now() < deadline, "the page never showed '{needle}':\n{text}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `check` holds on the page's visible text; the text then.
    pub async fn wait_until(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = self.text().await;
            if check(&text) {
                return text;
            }
            assert!(Instant::now() < deadline, "the page never showed {what}:\n{text}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the first button or link whose text is `label`.
    pub async fn click_labelled(&self, label: &str) {
        let xpath = format!("//*[self::button or self::a][normalize-space(.)='{label}']");
        let element = match self.client.wait().at_most(WAIT).for_element(Locator::XPath(&xpath)).await {
            Ok(element) => element,
            Err(e) => panic!("no button or link '{label}': {e}\n{}", self.text().await),
        };
        element.click().await.unwrap_or_else(|e| panic!("cannot click '{label}': {e}"));
    }

    /// Confirms the open confirmation dialog.
    pub async fn confirm(&self) {
        self.find("dialog[open] #confirm-ok").await.click().await.unwrap();
    }

    /// Runs `script` in the page; its result.
    pub async fn run(&self, script: &str) -> serde_json::Value {
        self.client.execute(script, vec![]).await.unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// Writes a PNG of the page as it is now to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.unwrap();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    /// Ends the session and the driver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
