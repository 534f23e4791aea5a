//! The admin API's errors: `{"code": "...", "message": "..."}` with the HTTP status of the
//! code. Scheduling errors keep their SPEC §14 codes; request problems the scheduler
//! never sees get the `ADMIN_*` codes below.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use sundial::error::SchedulingError;

/// A malformed body, path or query parameter (400).
pub const BAD_REQUEST: &str = "ADMIN_REQUEST_001";
/// A mutation without the configured bearer token, or with a wrong one (401).
pub const UNAUTHORIZED: &str = "ADMIN_AUTH_001";
/// No such endpoint (404).
pub const NO_ROUTE: &str = "ADMIN_ROUTE_001";
/// The endpoint exists, the method does not (405).
pub const BAD_METHOD: &str = "ADMIN_METHOD_001";
/// The body is larger than the API accepts (413).
pub const TOO_LARGE: &str = "ADMIN_BODY_001";
/// The body is not `application/json` (415).
pub const NOT_JSON: &str = "ADMIN_BODY_002";

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
    /// An `ADMIN_*` error.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self { status, body: ErrorBody { code: code.to_owned(), message: message.into() } }
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

/// A scheduling error's body: its code and its English message.
pub fn body_of(error: &SchedulingError) -> ErrorBody {
    ErrorBody { code: error.code().to_owned(), message: crate::spec::detail(error) }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}
