//! Names of jobs, triggers, lease resources, calendars and coordinated services and groups:
//! one grammar, `^[a-z0-9][a-z0-9._-]{0,127}$`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The longest name, in bytes (all allowed characters are ASCII).
pub const NAME_LEN_MAX: usize = 128;

/// Why a string is not a valid name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The string is empty.
    #[error("{kind} name is empty")]
    Empty {
        /// What the name was for (`job`, `trigger`, `resource`).
        kind: &'static str,
    },
    /// The string is longer than [`NAME_LEN_MAX`].
    #[error("{kind} name is {len} characters long; at most {NAME_LEN_MAX} are allowed")]
    TooLong {
        /// What the name was for.
        kind: &'static str,
        /// The length found.
        len: usize,
    },
    /// A character outside the grammar, at a byte position.
    #[error("{kind} name '{name}' has '{found}' at position {position}: names use a-z, 0-9, '.', '_' and '-', and start with a letter or digit")]
    InvalidCharacter {
        /// What the name was for.
        kind: &'static str,
        /// The offending name (shortened when long).
        name: String,
        /// The offending character.
        found: char,
        /// Its byte position.
        position: usize,
    },
}

fn validate(kind: &'static str, text: &str) -> Result<(), NameError> {
    if text.is_empty() {
        return Err(NameError::Empty { kind });
    }
    for (position, found) in text.char_indices() {
        let allowed =
            found.is_ascii_lowercase() || found.is_ascii_digit() || (position > 0 && matches!(found, '.' | '_' | '-'));
        if !allowed {
            let name: String = text.chars().take(NAME_LEN_MAX).collect();
            return Err(NameError::InvalidCharacter { kind, name, found, position });
        }
    }
    if text.len() > NAME_LEN_MAX {
        return Err(NameError::TooLong { kind, len: text.len() });
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        ///
        /// Shared text: a clone is a reference count, not a copy (a run's names travel
        /// through several actors and records on every fire).
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Checks `text` against the name grammar.
            ///
            /// # Errors
            /// [`NameError`] saying what is wrong and where.
            pub fn new(text: impl AsRef<str>) -> Result<Self, NameError> {
                text.as_ref().parse()
            }

            /// Whether `text` satisfies the name grammar.
            pub fn is_valid(text: &str) -> bool {
                validate($kind, text).is_ok()
            }

            /// The name as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = NameError;
            fn from_str(text: &str) -> Result<Self, NameError> {
                validate($kind, text)?;
                Ok(Self(Arc::from(text)))
            }
        }

        impl TryFrom<&str> for $name {
            type Error = NameError;
            fn try_from(text: &str) -> Result<Self, NameError> {
                text.parse()
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        // Equality, order and hash are the text's: sets and maps of names can be asked by `&str`.
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                // Borrowed where the format allows: one allocation, the shared text's.
                deserializer.deserialize_str(NameVisitor($kind)).map(Self)
            }
        }
    };
}

/// Reads a name of `kind` as shared text, checked against the grammar.
struct NameVisitor(&'static str);

impl serde::de::Visitor<'_> for NameVisitor {
    type Value = Arc<str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} name", self.0)
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Arc<str>, E> {
        validate(self.0, text).map_err(E::custom)?;
        Ok(Arc::from(text))
    }
}

name_type!(
    /// The name of a job, unique in a store.
    JobName,
    "job"
);
name_type!(
    /// The name of a trigger, unique within its job.
    TriggerName,
    "trigger"
);
name_type!(
    /// The name of a leader-lease resource (default `scheduling.jobs`).
    ResourceName,
    "resource"
);
name_type!(
    /// The name under which an exclusion calendar is registered.
    CalendarName,
    "calendar"
);
name_type!(
    /// The service an externally triggered job belongs to (see [`crate::coordination`]).
    ServiceName,
    "service"
);
name_type!(
    /// The group of an externally triggered job within its service (see
    /// [`crate::coordination`]).
    GroupName,
    "group"
);

/// A trigger's identity: (job name, trigger name).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct TriggerKey {
    /// The job the trigger belongs to.
    pub job: JobName,
    /// The trigger's name within the job.
    pub trigger: TriggerName,
}

impl TriggerKey {
    /// A key from its parts.
    pub fn new(job: JobName, trigger: TriggerName) -> Self {
        Self { job, trigger }
    }
}

impl fmt::Display for TriggerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.job, self.trigger)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        for ok in ["a", "0", "reports.nightly", "tenant-42_sync", &"a".repeat(128)] {
            assert!(JobName::is_valid(ok), "{ok}");
        }
        for bad in ["", ".a", "-a", "_a", "A", "a b", "a/b", "é", &"a".repeat(129)] {
            assert!(!JobName::is_valid(bad), "{bad}");
            assert!(JobName::new(bad).is_err());
        }
    }

    #[test]
    fn errors_say_what_and_where() {
        assert_eq!(JobName::new("").unwrap_err(), NameError::Empty { kind: "job" });
        assert_eq!(TriggerName::new("x".repeat(129)).unwrap_err(), NameError::TooLong { kind: "trigger", len: 129 });
        let err = JobName::new("abC").unwrap_err();
        assert_eq!(err.to_string(), "job name 'abC' has 'C' at position 2: names use a-z, 0-9, '.', '_' and '-', and start with a letter or digit");
    }

    #[test]
    fn serde_validates() {
        let name: JobName = serde_json::from_str("\"a.b\"").unwrap();
        assert_eq!(name.as_str(), "a.b");
        assert!(serde_json::from_str::<JobName>("\"A\"").is_err());
        let key = TriggerKey::new(name, TriggerName::new("default").unwrap());
        assert_eq!(key.to_string(), "a.b/default");
    }
}
