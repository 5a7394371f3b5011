//! Test certificates: the test kit's directory of them (made in-process), a CA, server
//! certificates for 127.0.0.1/localhost and client certificates, removed when dropped.

pub use snowflake_testkit::certs::CertDir as Certs;
