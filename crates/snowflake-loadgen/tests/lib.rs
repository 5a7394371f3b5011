//! Integration tests of the load generator: flag parsing, real runs against an in-test HTTP
//! server on 127.0.0.1, and runs over every protocol against the real service in-process.

mod flags;
mod protocols;
mod run;
mod service;
mod support;
