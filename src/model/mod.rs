//! The model: names, time and entropy, the cron dialect, schedules, calendars, job and
//! trigger definitions, the scheduling rules, errors and options. Plain values and pure
//! functions; nothing here reads a store.

pub mod audit;
pub mod calendar;
pub mod cron;
pub mod describe;
pub mod entropy;
pub mod error;
pub mod job;
pub mod lapse;
pub mod name;
pub mod options;
pub mod rules;
pub mod schedule;
pub mod time;
pub mod timezone;
