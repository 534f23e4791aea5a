//! Test support shared by the workspace's test targets (never a dependency of a
//! production build).

pub mod dir;
pub mod postgres;
