//! Test support shared by the workspace's test targets (never a dependency of a
//! production build).

pub mod browser;
pub mod conformance;
pub mod contenders;
pub mod dir;
pub mod fake_kubernetes;
pub mod nats;
pub mod node_process;
pub mod postgres;
pub mod process;
pub mod tls;
