//! llama.cpp engine tests with the real models, one binary (one link instead of one per file).

mod support;

mod embedding;
mod engine;
mod speculation;
mod tools;
