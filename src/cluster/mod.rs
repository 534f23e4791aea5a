//! Cluster coordination over the job store's keyspace: leader election and "run this once
//! across the cluster" for fires from another trigger source.

pub mod coordination;
pub mod leader;
