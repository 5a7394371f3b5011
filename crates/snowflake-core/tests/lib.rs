//! Integration tests of the core crate, one module per surface.

#[cfg(not(loom))]
mod encoding;
#[cfg(not(loom))]
mod generator;
#[cfg(not(loom))]
mod layouts;
#[cfg(loom)]
mod loom_model;
#[cfg(not(loom))]
mod properties;
#[cfg(all(not(loom), feature = "serde"))]
mod serde;
#[cfg(not(loom))]
mod stress;
#[cfg(not(loom))]
mod support;
