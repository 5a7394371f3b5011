//! The keeper: the reservations of the high-water mark ahead of the clock (on a timer and on
//! demand), stored in the state directory and the coordination service, the opening at start
//! and the final mark at shutdown.

use super::Node;
use super::readiness::Phase;
use crate::clock_trust::Reading;
use crate::state::{MarkKind, StateDir, StateError, Stored};
use snowflake_core::Clock;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

impl Node {
    /// Persists a reservation from the clock's current reading at once (unless one that covers
    /// it was just written), as the keeper would on its next tick: after a forward clock jump,
    /// requests wait for this write instead of failing.
    pub async fn reserve_now(&self) {
        if let Reading::Trusted { now_ms } = self.check_trust() {
            self.reserve(now_ms).await;
        }
    }

    /// Opens the node at once if the clock is already past its mark (the normal case): persists
    /// the first reservation and starts issuing. Otherwise the keeper opens it later.
    pub async fn start(&self) {
        let phase = self.shared.status().phase.clone();
        if let Phase::WaitingForMark { mark_ms } = phase {
            let now_ms = self.clock.now_ms();
            if now_ms <= mark_ms {
                tracing::warn!(
                    mark_ms,
                    now_ms,
                    wait_ms = mark_ms - now_ms + 1,
                    "the clock is behind the persisted high-water mark: not issuing ids until it passes it"
                );
            }
        }
        self.tick().await;
        // The fence may have changed while the first reservation was written; the keeper
        // applies later changes.
        let current = self
            .fence
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .as_ref()
            .map(|f| f.borrow().clone());
        if let Some(current) = current {
            snowflake_fleet::apply_fence(self, &current);
        }
    }

    /// The keeper, run until `shutdown` flips: opens a waiting node once its clock passes the
    /// mark, keeps the persisted reservation ahead of the clock, and (in a fleet) applies the
    /// coordination service's fence. The two run side by side, so a slow reservation write
    /// never delays closing the node when the lease is lost.
    pub async fn keep(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let fence = self
            .fence
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        let keep_fence = async {
            if let Some(fence) = fence {
                snowflake_fleet::keep_fence(&*self, fence, shutdown.clone()).await;
            }
        };
        tokio::join!(self.keep_reserving(shutdown.clone()), keep_fence);
    }

    async fn keep_reserving(&self, mut shutdown: watch::Receiver<bool>) {
        let period = Duration::from_millis((self.reserve_ms / 4).clamp(5, 1000));
        let mut tick = tokio::time::interval_at(Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                // The only change ever sent is `true`; a dropped sender means stop too.
                _ = shutdown.changed() => return,
            }
            // A reservation stuck on a stalled filesystem must not hold the shutdown up: it is
            // dropped (its blocking write goes on, and the final write waits for it, bounded).
            tokio::select! {
                () = self.tick() => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    /// One step of the keeper.
    async fn tick(&self) {
        let now_ms = match self.check_trust() {
            Reading::Trusted { now_ms } => now_ms,
            // Nothing beyond trusted time is reserved; the node opens or extends its
            // reservation once the step is trusted or the clock is back.
            Reading::Stepped(_) => return,
        };
        let phase = self.shared.status().phase.clone();
        let due = match phase {
            Phase::Starting | Phase::PersistFailed { .. } => true,
            Phase::WaitingForMark { mark_ms } => now_ms > mark_ms,
            Phase::Ready => {
                now_ms.saturating_add(self.reserve_ms / 2) >= self.shared.status().persisted_mark_ms
            }
            Phase::ShuttingDown => false,
        };
        if due {
            self.reserve(now_ms).await;
        }
    }

    /// Durably reserves up to `now + reserve_ms`, then lets the generator issue up to there.
    async fn reserve(&self, now_ms: u64) {
        let _writer = self.reserving.lock().await;
        // Another writer may have covered this reading while we waited for the lock.
        {
            let status = self.shared.status();
            if status.phase == Phase::ShuttingDown
                || (status.phase == Phase::Ready
                    && now_ms.saturating_add(self.reserve_ms / 2) < status.persisted_mark_ms)
            {
                return;
            }
        }
        // Never past the layout's last millisecond: a mark there could never be passed.
        let target_ms = now_ms
            .saturating_add(self.reserve_ms)
            .max(self.shared.status().persisted_mark_ms)
            .min(self.layout.max_timestamp_ms().saturating_sub(1));
        let result = self.store(target_ms, MarkKind::Reservation, now_ms).await;
        let mut status = self.shared.status();
        if status.phase == Phase::ShuttingDown {
            return;
        }
        match result {
            Ok(()) => {
                // A re-claim applied while the write was in flight may have raised the mark to
                // the pair's floor and set the node waiting for it: never undo either.
                status.persisted_mark_ms = status.persisted_mark_ms.max(target_ms);
                let waiting =
                    matches!(status.phase, Phase::WaitingForMark { mark_ms } if mark_ms >= now_ms);
                if status.phase != Phase::Ready && !waiting {
                    tracing::info!(
                        reserved_until_ms = status.persisted_mark_ms,
                        "ready: issuing ids"
                    );
                    status.phase = Phase::Ready;
                }
                self.shared
                    .generator
                    .set_issue_limit_ms(status.issue_limit_ms());
            }
            Err(err) => {
                let message = err.to_string();
                if !matches!(&status.phase, Phase::PersistFailed { message: m } if *m == message) {
                    tracing::error!(error = %message, "cannot persist the high-water mark; ids stop at the last persisted mark");
                }
                if status.phase == Phase::Ready
                    || matches!(status.phase, Phase::PersistFailed { .. })
                {
                    status.phase = Phase::PersistFailed { message };
                }
            }
        }
    }

    async fn store(
        &self,
        high_water_ms: u64,
        kind: MarkKind,
        now_ms: u64,
    ) -> Result<(), StateError> {
        let generator = &self.shared.generator;
        let mark = StateDir::mark(
            generator.datacenter_id(),
            generator.worker_id(),
            &self.layout,
            high_water_ms,
            kind,
            now_ms,
        );
        // The time trusted now, for the next run's clock check (see `Node::with_coordinator`).
        let point = self.trust.trusted_point();
        let state = Arc::clone(&self.state);
        let result = tokio::task::spawn_blocking(move || {
            let stored = state.store(&mark)?;
            if let Some(point) = point
                && let Err(err) = state.store_clock(&point)
            {
                tracing::warn!(error = %err, "cannot record the trusted time for the next run's clock check");
            }
            Ok(stored)
        })
        .await
            .unwrap_or_else(|join| {
                let path = self
                    .state
                    .file(generator.datacenter_id(), generator.worker_id());
                Err(StateError::Write {
                    path,
                    source: std::io::Error::other(join),
                })
            });
        match &result {
            Ok(Stored::Written) => {
                self.metrics.state_writes.inc();
            }
            Ok(Stored::AlreadyCovered) => {}
            Err(_) => {
                self.metrics.state_write_errors.inc();
            }
        }
        result?;
        // Then the coordination service, so a successor on another machine sees it too.
        if let Some(coordinator) = &self.shared.coordinator {
            let stored = coordinator.store_mark(high_water_ms).await;
            match &stored {
                Ok(()) => self.metrics.lease_mark_writes.inc(),
                Err(_) => self.metrics.lease_mark_write_errors.inc(),
            };
            stored.map_err(|source| StateError::Fleet {
                service: coordinator.source(),
                source,
            })?;
        }
        Ok(())
    }

    /// Stops issuing for good and records the exact point reached, so the next start serves at
    /// once. Call after every front end has stopped.
    pub async fn shutdown(&self) -> Result<u64, StateError> {
        let persisted_ms = {
            let mut status = self.shared.status();
            status.phase = Phase::ShuttingDown;
            self.shared.generator.set_issue_limit_ms(0);
            status.persisted_mark_ms
        };
        // Read after closing: every ID issued under the old limit has a timestamp at or below
        // this reading (see `Generator::set_issue_limit_ms`), and at or below the reservation.
        let now_ms = self.clock.now_ms();
        // The mark records when it was written in trusted time, not the wall clock's: a clock
        // stepped ahead at the moment of the stop must not become the next run's starting
        // point (it raises trusted time to it).
        let written_ms = match self.trust.read() {
            Reading::Trusted { now_ms } => now_ms,
            Reading::Stepped(step) => step.trusted_ms,
        };
        let last_ms = self.shared.generator.last_issued_ms().unwrap_or(0);
        let mark_ms = last_ms.max(now_ms).min(persisted_ms.max(last_ms));
        if persisted_ms == 0 && last_ms == 0 {
            return Ok(0);
        }
        // A write in flight (a reservation whose request timed out, a first write stuck on a
        // frozen or unreachable filesystem) finishes first: the state directory takes one writer
        // at a time. Bounded, so that a stuck filesystem never makes SIGTERM wait for ever; the
        // reservation already on disk covers every issued ID.
        let stored = tokio::time::timeout(
            self.shutdown_timeout,
            self.store(mark_ms, MarkKind::Shutdown, written_ms),
        )
        .await
        .unwrap_or_else(|_| {
            Err(StateError::Write {
                path: self.state.file(
                    self.shared.generator.datacenter_id(),
                    self.shared.generator.worker_id(),
                ),
                source: std::io::Error::other(format!(
                    "no answer within {} ms (a stuck filesystem?); the reservation already on \
                     disk covers every issued id",
                    self.shutdown_timeout.as_millis()
                )),
            })
        });
        stored?;
        self.shared.status().persisted_mark_ms = mark_ms;
        Ok(mark_ms)
    }
}
