//! The engine's native pre-op a pipeline can name between its pre-plugins and the model (fused
//! resize + normalize + HWC RGB8 → NCHW f32). It lives in the engine, which also runs it for
//! models whose config names it; its errors convert to 400s like every engine error.

pub use infergate_engine::preprocess::ResizeNormalize;
