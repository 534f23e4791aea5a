//! Registration (SPEC §2): job types with their factories, code jobs, calendars.
//!
//! Built once, before the node starts, through [`RegistryBuilder`]; building fails loudly
//! on a code job registered twice, a definition naming an unregistered type or calendar, or
//! any invalid definition. Every node of a cluster must register the same types.

use std::collections::BTreeMap;
use std::sync::Arc;

use sundial::calendar::{Calendars, JobCalendar};
use sundial::job::{JobDefinition, JobTriggerDefinition, JobTypeKey};
use sundial::name::{CalendarName, JobName, TriggerName};
use sundial::schedule::JobSchedule;

use crate::job::{DynJob, Job, JobFactory};

/// Why a registry could not be built: every problem found, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job registration failed:\n  {}", problems.join("\n  "))]
pub struct RegistrationError {
    /// Each problem, in words.
    pub problems: Vec<String>,
}

/// The registered job types, code jobs and calendars of a node.
#[derive(Clone)]
pub struct JobRegistry {
    types: BTreeMap<String, JobFactory>,
    code_jobs: BTreeMap<JobName, JobDefinition>,
    calendars: Arc<Calendars>,
}

impl std::fmt::Debug for JobRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRegistry")
            .field("types", &self.types.keys().collect::<Vec<_>>())
            .field("code_jobs", &self.code_jobs.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl JobRegistry {
    /// An empty builder.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// The registered type keys, ascending (for admin UIs that create jobs).
    pub fn type_keys(&self) -> impl Iterator<Item = &str> {
        self.types.keys().map(String::as_str)
    }

    /// Whether `key` is registered.
    pub fn has_type(&self, key: &str) -> bool {
        self.types.contains_key(key)
    }

    /// A fresh instance of the job type `key`.
    pub fn make(&self, key: &str) -> Option<Box<dyn DynJob>> {
        self.types.get(key).map(|factory| factory())
    }

    /// The code definition of `name`, if it is a code job.
    pub fn code_job(&self, name: &JobName) -> Option<&JobDefinition> {
        self.code_jobs.get(name)
    }

    /// Every code job, by name.
    pub fn code_jobs(&self) -> impl Iterator<Item = &JobDefinition> {
        self.code_jobs.values()
    }

    /// The named calendars.
    pub fn calendars(&self) -> &Arc<Calendars> {
        &self.calendars
    }
}

/// Collects registrations; [`RegistryBuilder::build`] checks them all.
#[derive(Default)]
pub struct RegistryBuilder {
    types: BTreeMap<String, JobFactory>,
    code_jobs: Vec<JobDefinition>,
    calendars: Calendars,
    problems: Vec<String>,
}

impl std::fmt::Debug for RegistryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryBuilder").field("code_jobs", &self.code_jobs.len()).finish_non_exhaustive()
    }
}

fn type_key_of<T>() -> String {
    std::any::type_name::<T>().to_owned()
}

impl RegistryBuilder {
    /// Registers job type `T` under its full type name, made by `factory` for each run.
    pub fn add_job_type<T: Job>(self, factory: impl Fn() -> T + Send + Sync + 'static) -> Self {
        self.add_job_type_as(type_key_of::<T>(), factory)
    }

    /// Registers job type `T` under `key`.
    pub fn add_job_type_as<T: Job>(
        mut self,
        key: impl Into<String>,
        factory: impl Fn() -> T + Send + Sync + 'static,
    ) -> Self {
        let key = key.into();
        if let Err(e) = JobTypeKey::new(key.clone()) {
            self.problems.push(format!("job type key '{key}': {e}"));
            return self;
        }
        self.types.insert(key, Arc::new(move || Box::new(factory()) as Box<dyn DynJob>));
        self
    }

    /// A code job of type `T` (registered under its full type name) with one trigger named
    /// `default` on `schedule`; a manual schedule gives the job no trigger.
    pub fn add_job<T: Job>(
        self,
        name: &str,
        schedule: JobSchedule,
        factory: impl Fn() -> T + Send + Sync + 'static,
    ) -> Self {
        let key = type_key_of::<T>();
        let mut builder = self.add_job_type_as(key.clone(), factory);
        let def = match (JobName::new(name), JobTypeKey::new(key)) {
            (Ok(name), Ok(key)) => JobDefinition::new(name, key),
            (Err(e), _) => {
                builder.problems.push(format!("code job '{name}': {e}"));
                return builder;
            }
            (_, Err(e)) => {
                builder.problems.push(format!("code job '{name}': {e}"));
                return builder;
            }
        };
        let def = if schedule.is_manual() {
            def
        } else {
            let default = TriggerName::new("default").unwrap_or_else(|_| unreachable!("valid literal"));
            def.with_trigger(JobTriggerDefinition::new(default, schedule))
        };
        builder.code_jobs.push(def);
        builder
    }

    /// A full code job definition; its type must be registered too.
    pub fn add_job_definition(mut self, def: JobDefinition) -> Self {
        self.code_jobs.push(def);
        self
    }

    /// A named exclusion calendar.
    pub fn add_calendar(mut self, name: &str, calendar: Arc<dyn JobCalendar>) -> Self {
        match CalendarName::new(name) {
            Ok(name) => self.calendars.insert(name, calendar),
            Err(e) => self.problems.push(format!("calendar '{name}': {e}")),
        }
        self
    }

    /// Checks everything and builds the registry.
    ///
    /// # Errors
    /// [`RegistrationError`] listing every problem: a code job registered twice, a
    /// definition with an unregistered type or calendar, or an otherwise invalid one.
    pub fn build(self) -> Result<JobRegistry, RegistrationError> {
        let mut problems = self.problems;
        let mut code_jobs = BTreeMap::new();
        for def in self.code_jobs {
            if code_jobs.contains_key(&def.name) {
                problems.push(format!("code job '{}' is registered twice", def.name));
                continue;
            }
            if !self.types.contains_key(def.job_type.as_str()) {
                problems
                    .push(format!("code job '{}' uses job type '{}', which is not registered", def.name, def.job_type));
            }
            if let Err(e) = def.validate(Some(&self.calendars)) {
                problems.push(format!("code job '{}': {e}", def.name));
            }
            code_jobs.insert(def.name.clone(), def);
        }
        if !problems.is_empty() {
            return Err(RegistrationError { problems });
        }
        Ok(JobRegistry { types: self.types, code_jobs, calendars: Arc::new(self.calendars) })
    }
}
