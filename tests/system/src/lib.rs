//! The system suite (`tests/system`): its tests are the `system` and `container` test targets
//! beside this file; this library is empty (cargo needs one target that is not a test). What the
//! tests share lives in `snowflake-testkit`. See docs/testing.md.
