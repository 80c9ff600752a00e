//! Plugin host tests, one binary (one link instead of one per file).

mod common;

mod cache;
mod containment;
mod examples;
mod guardrails;
mod isolation;
mod validation;
