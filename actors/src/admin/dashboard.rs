//! The web dashboard: one page and its script and style, compiled into the binary and
//! served at `/` and `/assets/…`. The page reads and changes everything through the
//! admin API (`/api/…`) with the token the user gives it, kept in the browser session,
//! so it can do exactly what that token may. The assets hold no data and are served to
//! anyone; a strict content security policy lets the page load only its own script and
//! style and talk only to its own node.
//!
//! Sources: `actors/src/admin/dashboard/` (plain HTML, CSS and JavaScript, no build
//! step).

use axum::extract::Path;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::error::{self, ApiError};

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/app.css");

/// What a browser may load and reach from the page.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                      connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

/// Whether `path` is the dashboard's (served to anyone: it holds no data).
pub fn is_dashboard(path: &str) -> bool {
    path == "/" || path.starts_with("/assets/")
}

fn with_headers(content_type: &'static str, cache: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// `GET /`: the page.
pub async fn index() -> Response {
    let mut response = with_headers("text/html; charset=utf-8", "no-cache", INDEX);
    response.headers_mut().insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    response.headers_mut().insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// `GET /assets/{file}`: its script and style.
pub async fn asset(Path(file): Path<String>) -> Response {
    // Revalidated each load: a node upgraded in place serves its own script at once.
    match file.as_str() {
        "app.js" => with_headers("text/javascript; charset=utf-8", "no-cache", SCRIPT),
        "app.css" => with_headers("text/css; charset=utf-8", "no-cache", STYLE),
        _ => ApiError::new(axum::http::StatusCode::NOT_FOUND, error::NO_ROUTE, "no such asset").into_response(),
    }
}
