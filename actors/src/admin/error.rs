//! The admin API's errors: `{"code": "...", "message": "..."}` with the HTTP status of the
//! code. Scheduling errors keep their SPEC §14 codes; request problems the scheduler
//! never sees get the `ADMIN_*` codes below.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use sundial::error::{Language, SchedulingError};

tokio::task_local! {
    /// The language the current request asked for (`Accept-Language`), set by the
    /// router's middleware for the handler's task.
    pub(crate) static LANGUAGE: Language;
}

/// The request's language, English outside a request.
fn language() -> Language {
    LANGUAGE.try_with(|l| *l).unwrap_or(Language::English)
}

/// The language an `Accept-Language` header prefers among English and Simplified
/// Chinese: the first `zh…` or `en…` entry by quality.
pub(crate) fn preferred_language(header: Option<&str>) -> Language {
    let Some(header) = header else { return Language::English };
    let mut best: Option<(f32, Language)> = None;
    for entry in header.split(',') {
        let mut parts = entry.trim().split(';');
        let tag = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let quality =
            parts.find_map(|p| p.trim().strip_prefix("q=").and_then(|q| q.parse::<f32>().ok())).unwrap_or(1.0);
        let language = if tag.starts_with("zh") {
            Language::SimplifiedChinese
        } else if tag.starts_with("en") {
            Language::English
        } else {
            continue;
        };
        if best.is_none_or(|(q, _)| quality > q) {
            best = Some((quality, language));
        }
    }
    best.map_or(Language::English, |(_, language)| language)
}

/// A malformed body, path or query parameter (400).
pub const BAD_REQUEST: &str = "ADMIN_REQUEST_001";
/// A request without a bearer token on a node that has tokens, or with a wrong one (401).
pub const UNAUTHORIZED: &str = "ADMIN_AUTH_001";
/// A change with a token of the `read` role (403).
pub const FORBIDDEN: &str = "ADMIN_AUTH_002";
/// No such endpoint (404).
pub const NO_ROUTE: &str = "ADMIN_ROUTE_001";
/// The endpoint exists, the method does not (405).
pub const BAD_METHOD: &str = "ADMIN_METHOD_001";
/// The body is larger than the API accepts (413).
pub const TOO_LARGE: &str = "ADMIN_BODY_001";

/// An error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable code.
    pub code: String,
    /// For people.
    pub message: String,
}

/// An error response.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    /// An `ADMIN_*` error; in Chinese, the code's Chinese summary leads the English detail.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        let message = match (language(), admin_summary_zh(code)) {
            (Language::SimplifiedChinese, Some(zh)) => format!("{zh}: {message}"),
            _ => message,
        };
        Self { status, body: ErrorBody { code: code.to_owned(), message } }
    }

    /// A 400 naming what was wrong with the request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, BAD_REQUEST, message)
    }

    /// The body.
    pub fn body(&self) -> &ErrorBody {
        &self.body
    }
}

impl From<SchedulingError> for ApiError {
    fn from(error: SchedulingError) -> Self {
        let status = StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Self { status, body: body_of(&error) }
    }
}

/// A scheduling error's body: its code and its message in the request's language.
pub fn body_of(error: &SchedulingError) -> ErrorBody {
    let message = match language() {
        Language::English => crate::spec::detail(error),
        other => {
            let text = error.localized(other);
            let prefix = format!("{}: ", error.code());
            text.strip_prefix(&prefix).map(str::to_owned).unwrap_or(text)
        }
    };
    ErrorBody { code: error.code().to_owned(), message }
}

fn admin_summary_zh(code: &str) -> Option<&'static str> {
    Some(match code {
        BAD_REQUEST => "请求格式错误",
        UNAUTHORIZED => "未授权",
        FORBIDDEN => "只读令牌不能修改",
        NO_ROUTE => "没有这个接口",
        BAD_METHOD => "接口不支持该方法",
        TOO_LARGE => "请求体过大",
        _ => return None,
    })
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_language_picks_chinese_or_english() {
        assert_eq!(preferred_language(None), Language::English);
        assert_eq!(preferred_language(Some("zh-CN,zh;q=0.9,en;q=0.8")), Language::SimplifiedChinese);
        assert_eq!(preferred_language(Some("en-US,zh;q=0.5")), Language::English);
        assert_eq!(preferred_language(Some("fr, zh;q=0.3")), Language::SimplifiedChinese);
        assert_eq!(preferred_language(Some("fr")), Language::English);
    }

    #[tokio::test]
    async fn messages_follow_the_request_language() {
        let error = SchedulingError::JobNotFound { job: "a".into() };
        let english = body_of(&error).message;
        let chinese = LANGUAGE.scope(Language::SimplifiedChinese, async { body_of(&error).message }).await;
        assert!(english.starts_with("job not registered"), "{english}");
        assert_eq!(chinese, "作业未登记: 'a'");
        let admin =
            LANGUAGE.scope(Language::SimplifiedChinese, async { ApiError::bad_request("x").body.message }).await;
        assert_eq!(admin, "请求格式错误: x");
    }
}
