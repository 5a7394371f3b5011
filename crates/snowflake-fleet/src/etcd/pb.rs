//! etcd's API (`etcdserverpb`, the subset in `proto/etcd/rpc.proto`), generated at build time.

tonic::include_proto!("etcdserverpb");
