//! SDK for infergate plugins: WebAssembly components that pre-process requests
//! before a model and post-process its results.
//!
//! A plugin implements [`Plugin`] and exports it with [`export_plugin!`]:
//!
//! ```ignore
//! use infergate_plugin_sdk::*;
//!
//! struct Upper;
//!
//! impl Plugin for Upper {
//!     fn describe() -> Description {
//!         describe("upper", "0.1.0", PluginKind::Pre, &["text/plain"], &["text: bytes [1]"])
//!     }
//!     fn preprocess(input: PreInput, _metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
//!         let text = input_bytes(&input)?.to_ascii_uppercase();
//!         Ok(vec![Tensor::from_byte_strings("text", vec![1], [text.as_slice()])])
//!     }
//! }
//!
//! export_plugin!(Upper);
//! ```
//!
//! Build for `wasm32-unknown-unknown` and wrap the module into a component
//! (see `plugins/README.md`).

#[cfg(all(
    feature = "arena",
    target_arch = "wasm32",
    not(target_feature = "atomics")
))]
mod arena;
mod errors;
pub mod log;
mod metadata;
mod tensor;

#[doc(hidden)]
pub mod __bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "infergate:plugin/plugin@0.1.0",
        export_macro_name: "__export_plugin_world",
        pub_export_macro: true,
        default_bindings_module: "infergate_plugin_sdk::__bindings",
    });
}

pub use __bindings::infergate::plugin::types::{
    Datatype, Description, Metadata, PluginError, PluginKind, PostOutput, PreInput, Tensor,
};
pub use metadata::{input_bytes, metadata_get};
pub use tensor::ElementBytes;

/// What a plugin implements. Only [`Plugin::describe`] is required; a
/// pre-processing plugin overrides [`Plugin::preprocess`], a post-processing
/// one [`Plugin::postprocess`].
///
/// Each call runs in a fresh instance: statics start from their initial value
/// every time, so a plugin cannot (and need not) carry state between calls.
pub trait Plugin {
    /// Name, version, kind and I/O of the plugin.
    fn describe() -> Description;

    /// Request body or tensors + metadata -> model input tensors.
    fn preprocess(input: PreInput, metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
        let _ = (input, metadata);
        Err(PluginError::Failure(
            "this plugin does not implement preprocess".into(),
        ))
    }

    /// Model output tensors + metadata -> response tensors, JSON or bytes.
    fn postprocess(outputs: Vec<Tensor>, metadata: Metadata) -> Result<PostOutput, PluginError> {
        let _ = (outputs, metadata);
        Err(PluginError::Failure(
            "this plugin does not implement postprocess".into(),
        ))
    }
}

impl<T: Plugin> __bindings::Guest for T {
    fn describe() -> Description {
        <T as Plugin>::describe()
    }
    fn preprocess(input: PreInput, metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
        <T as Plugin>::preprocess(input, metadata)
    }
    fn postprocess(outputs: Vec<Tensor>, metadata: Metadata) -> Result<PostOutput, PluginError> {
        <T as Plugin>::postprocess(outputs, metadata)
    }
}

/// Builds a [`Description`] from string slices.
pub fn describe(
    name: &str,
    version: &str,
    kind: PluginKind,
    consumes: &[&str],
    produces: &[&str],
) -> Description {
    Description {
        name: name.into(),
        version: version.into(),
        kind,
        consumes: consumes.iter().map(|s| s.to_string()).collect(),
        produces: produces.iter().map(|s| s.to_string()).collect(),
    }
}

/// Exports a type implementing [`Plugin`] as the component's `plugin` world.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ident) => {
        $crate::__bindings::__export_plugin_world!($plugin with_types_in $crate::__bindings);
    };
}
