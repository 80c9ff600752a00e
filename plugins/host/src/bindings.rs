//! Host bindings generated from `plugins/wit` for the `plugin` world.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "infergate:plugin/plugin@0.1.0",
});
