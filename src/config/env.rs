//! Where configuration strings come from: the process environment in
//! production, a map in tests. Read once, at startup, through [`Env`].

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::ConfigError;
use istiod_config::duration;

/// A source of environment variables.
pub trait Env {
    /// The value of `name`, or `None` when it is not set.
    fn get(&self, name: &str) -> Option<String>;
}

/// The real process environment.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        // A value that is not UTF-8 is passed on as lossy text so that the
        // parser rejects it with the variable's name instead of ignoring it.
        std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
    }
}

impl<K: std::borrow::Borrow<str> + Ord, V: AsRef<str>> Env for BTreeMap<K, V> {
    fn get(&self, name: &str) -> Option<String> {
        BTreeMap::get(self, name).map(|v| v.as_ref().to_owned())
    }
}

impl<K: std::borrow::Borrow<str> + std::hash::Hash + Eq, V: AsRef<str>> Env for HashMap<K, V> {
    fn get(&self, name: &str) -> Option<String> {
        HashMap::get(self, name).map(|v| v.as_ref().to_owned())
    }
}

impl<E: Env + ?Sized> Env for &E {
    fn get(&self, name: &str) -> Option<String> {
        (**self).get(name)
    }
}

/// Typed reads of variables. An empty value counts as unset, and a value
/// that does not parse is noted (variable, value, what was expected) and
/// its default used, as istiod's `env` package does ("Invalid environment
/// variable value ..., defaulting to ..."): a typo in one variable does
/// not stop the server. The notes are logged once logging is set up.
pub(crate) struct Vars<'a> {
    env: &'a dyn Env,
    invalid: std::cell::RefCell<Vec<String>>,
}

impl<'a> Vars<'a> {
    pub(crate) fn new(env: &'a dyn Env) -> Self {
        Self { env, invalid: std::cell::RefCell::new(Vec::new()) }
    }

    /// The values that did not parse, each with the default used instead.
    /// Notes a value that is read in part (the rest is logged at start).
    pub(crate) fn warn(&self, message: String) {
        self.invalid.borrow_mut().push(message);
    }

    pub(crate) fn invalid(&self) -> Vec<String> {
        self.invalid.borrow().clone()
    }

    /// Notes `e` and answers `default`.
    fn defaulted<T: std::fmt::Debug>(&self, e: ConfigError, default: T) -> Result<T, ConfigError> {
        self.invalid.borrow_mut().push(format!("{e}; using the default {default:?}"));
        Ok(default)
    }

    pub(crate) fn raw(&self, name: &'static str) -> Option<String> {
        self.env.get(name).filter(|v| !v.is_empty())
    }

    /// Set, to the empty string: for the few variables where istiod tells
    /// empty from unset (`INJECTION_WEBHOOK_CONFIG_NAME=""` turns patching
    /// off).
    pub(crate) fn set_empty(&self, name: &'static str) -> bool {
        self.env.get(name).is_some_and(|v| v.is_empty())
    }

    pub(crate) fn string(&self, name: &'static str, default: &str) -> String {
        self.raw(name).unwrap_or_else(|| default.to_owned())
    }

    pub(crate) fn duration(&self, name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
        match self.raw(name) {
            None => Ok(default),
            Some(v) => match duration::parse(&v) {
                Ok(d) => Ok(d),
                Err(e) => self.defaulted(ConfigError::Env { name, value: v, reason: e.to_string() }, default),
            },
        }
    }

    pub(crate) fn bool(&self, name: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.raw(name) {
            None => Ok(default),
            Some(v) => match crate::cli::parse_bool(&v) {
                Some(b) => Ok(b),
                None => self.defaulted(
                    ConfigError::Env {
                        name,
                        value: v,
                        reason: "expected a boolean (1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)".into(),
                    },
                    default,
                ),
            },
        }
    }

    pub(crate) fn int<T: std::str::FromStr + std::fmt::Debug>(
        &self,
        name: &'static str,
        default: T,
    ) -> Result<T, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        match self.raw(name) {
            None => Ok(default),
            Some(v) => match v.trim().parse() {
                Ok(n) => Ok(n),
                Err(e) => {
                    let reason = format!("expected an integer: {e}");
                    self.defaulted(ConfigError::Env { name, value: v, reason }, default)
                }
            },
        }
    }

    pub(crate) fn float(&self, name: &'static str, default: f64) -> Result<f64, ConfigError> {
        match self.raw(name) {
            None => Ok(default),
            Some(v) => match v.trim().parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(f),
                _ => self
                    .defaulted(ConfigError::Env { name, value: v, reason: "expected a finite number".into() }, default),
            },
        }
    }
}
