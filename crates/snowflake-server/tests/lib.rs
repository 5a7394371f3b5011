//! In-process tests of the service: the real server on 127.0.0.1:0, driven by a manual clock.

mod client_layouts;
mod config;
mod doors;
mod fleet;
mod fleet_fake;
mod grpc;
mod grpc_frames;
mod grpc_limits;
mod http_answers;
mod http_api;
mod js_safe_bulk;
mod layouts;
mod listen;
mod mixed;
mod resp;
mod restart;
mod start_log;
mod state_layout;
mod support;
mod thrift;
