//! The marks reader: each pair's high-water mark in the coordination service (read
//! linearizably) and in every node's state directory, for the checker.

use super::{Access, Mode, PREFIX, ZK_PATH};
use crate::secure::EtcdUser;
use std::collections::HashMap;
use std::path::PathBuf;

/// Reads the marks: in the coordination service (linearizably: etcd's default read; for
/// ZooKeeper, a write on the session first, so neither a lagging follower nor a leader cut off
/// from its quorum can answer an old mark) and in every node's state directory.
#[derive(Debug, Clone)]
pub struct MarkReader {
    pub(super) mode: Mode,
    pub(super) access: Access,
    pub(super) state_dirs: Vec<PathBuf>,
}

impl MarkReader {
    /// The mark of each pair in the coordination service.
    pub fn coordination(&self) -> anyhow::Result<HashMap<(u64, u64), u64>> {
        let mut marks = HashMap::new();
        match self.mode {
            Mode::Etcd => {
                let out = self.access.etcdctl(
                    EtcdUser::Operator,
                    &["get", "--prefix", &format!("{PREFIX}/marks/")],
                )?;
                let lines: Vec<&str> = out.lines().collect();
                for pair in lines.chunks(2) {
                    let [key, value] = pair else { continue };
                    let mut parts = key.rsplit('/');
                    let (Some(w), Some(d)) = (parts.next(), parts.next()) else {
                        continue;
                    };
                    let (Ok(w), Ok(d)) = (w.parse::<u64>(), d.parse::<u64>()) else {
                        continue;
                    };
                    if let Some(ms) = high_water_ms(value.as_bytes()) {
                        marks.insert((d, w), ms);
                    }
                }
            }
            Mode::Zookeeper => {
                let path = format!("{ZK_PATH}-marks");
                let found = self.access.zookeeper(async |client| {
                    // A write first: `sync` is not enough, since a leader cut off from its
                    // followers keeps serving reads (and answers `sync` at once) until it
                    // notices, which a 30-minute run caught as marks "below" IDs. A server
                    // answers a write only once the quorum committed it, and this session's
                    // later reads see everything committed before it.
                    let probe = format!("{ZK_PATH}-probe");
                    match client
                        .create(
                            &probe,
                            b"",
                            &zookeeper_client::CreateMode::Persistent
                                .with_acls(zookeeper_client::Acls::anyone_all()),
                        )
                        .await
                    {
                        Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                        Err(err) => return Err(err.into()),
                    }
                    client.set_data(&probe, b"read", None).await?;
                    client.sync(&path).await?;
                    let mut found = Vec::new();
                    for worker in client.list_children(&path).await? {
                        let (data, _) = client.get_data(&format!("{path}/{worker}")).await?;
                        found.push((worker, data));
                    }
                    Ok(found)
                })?;
                for (worker, data) in found {
                    if let (Ok(w), Some(ms)) = (worker.parse::<u64>(), high_water_ms(&data)) {
                        // One path per datacenter: the campaign's nodes are datacenter 0.
                        marks.insert((0, w), ms);
                    }
                }
            }
        }
        Ok(marks)
    }

    /// The marks in every node's state directory: (node, datacenter, worker) → ms.
    pub fn local(&self) -> HashMap<(usize, u64, u64), u64> {
        let mut marks = HashMap::new();
        for (i, dir) in self.state_dirs.iter().enumerate() {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                // The marks themselves (`node-D-W.json`), not temporary files being written.
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if !(name.starts_with("node-") && name.ends_with(".json")) {
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(entry.path()) else {
                    continue;
                };
                let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else {
                    continue;
                };
                if let (Some(d), Some(w), Some(ms)) = (
                    json["datacenter_id"].as_u64(),
                    json["worker_id"].as_u64(),
                    json["high_water_ms"].as_u64(),
                ) {
                    marks.insert((i, d, w), ms);
                }
            }
        }
        marks
    }
}

/// `high_water_ms` of a mark's JSON.
fn high_water_ms(value: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(value).ok()?["high_water_ms"].as_u64()
}
