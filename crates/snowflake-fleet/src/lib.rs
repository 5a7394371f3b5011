//! The fleet: leasing an ID issuer its (datacenter, worker) pair from a coordination service,
//! [`etcd`] (a lease with keep-alives) or [`zookeeper`] (an ephemeral znode, the 2010 layout),
//! side by side with what they share.
//!
//! What an issuer needs from a coordination service that leases its pair: a [`Fence`] that
//! says until when the pair is provably held, and a durable copy of the high-water mark that
//! only the holder can write. The [`Coordinator`] trait is that, for either service; the
//! bookkeeping of the fence both share is the `proof` module's.
//!
//! The issuer never issues an ID while the fence is down or past its deadline, and never above
//! a mark that the coordination service has not durably accepted. A successor that claims the
//! pair reads that mark and issues only above it, so even a predecessor that lost its lease
//! without noticing (frozen, partitioned, its clock ahead) cannot collide with it: everything
//! it could still issue is at or below the mark it wrote while it held the pair.
//!
//! The fleet fences an issuer through the small [`Issuer`] trait (set its issue limit, read its
//! last issued ms, fence it with a reason), driven by [`keep_fence`]: the server's node is one
//! issuer, a keeper granting a PostgreSQL extension its issue limit another. [`connect`] joins
//! a fleet: which coordinator, the claim, and the pair given back when the issuer fails to open.
//!
//! Files, one concept each: `config` (the settings), `connect` (joining), `coordinator`
//! (the trait), `fence` and `issuer` (the fence and its driver), `proof` (the shared
//! bookkeeping), `lease_info`, `held` and `view` (what `/v1/info` and the status page show),
//! `mark` (the marks' JSON), `fleet_layout` (the layout a fleet records once), `error`; then
//! [`etcd`] and [`zookeeper`], one file per part of their protocol.

#![deny(missing_docs)]

/// True only in the fault campaign's self-test build (`scripts/campaign --self-test`), which has
/// a safety check of the etcd lease disabled so that the campaign must find duplicate IDs.
/// Never run it for real.
pub const CAMPAIGN_BUG_BUILD: bool = cfg!(snowflake_campaign_bug);

mod config;
mod connect;
mod coordinator;
mod error;
mod fence;
mod fleet_layout;
mod held;
mod issuer;
mod lease_info;
mod mark;
mod proof;
mod view;

pub mod etcd;
pub mod zookeeper;

pub use config::{ClientTls, EtcdAuth, EtcdConfig, Secret, ZooKeeperConfig};
pub use connect::{Applicant, ConnectError, Coordination, Listener, Pair, PairRequest, connect};
pub use coordinator::{BoxFuture, Coordinator};
pub use error::FleetError;
pub use fence::{Fence, FenceLimit, NOT_RENEWED};
pub use fleet_layout::{LayoutMismatch, read_record as read_layout_record};
pub use held::HeldPair;
pub use issuer::{Fenced, IssueLimit, Issuer, KEEPER_STOPPED, apply_fence, keep_fence};
pub use lease_info::{LeaseInfo, LeaseStatus};
pub use mark::{
    LowerMark, Lowering, Mark, MarkError, StoredMark, check_mark_in_layout, mark_json, parse_mark,
    usable_mark,
};
pub use view::{FLEET_REFRESH, FleetRead, FleetView};
