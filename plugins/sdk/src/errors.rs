//! Constructors that say whose fault an error is.

use crate::PluginError;

impl PluginError {
    /// The input is not acceptable: the client's fault (HTTP 422).
    pub fn bad_input(message: impl Into<String>) -> Self {
        PluginError::BadInput(message.into())
    }

    /// The plugin failed on acceptable input: the plugin's fault (HTTP 500).
    pub fn failure(message: impl Into<String>) -> Self {
        PluginError::Failure(message.into())
    }
}
