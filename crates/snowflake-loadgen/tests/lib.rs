//! Integration tests of the load generator: flag parsing, and real runs against an in-test HTTP
//! server on 127.0.0.1.

mod flags;
mod run;
mod support;
