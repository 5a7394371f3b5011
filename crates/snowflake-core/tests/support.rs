//! Test clocks.

use snowflake_core::Clock;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// A clock that returns scripted readings in order, then repeats the last one forever, and counts
/// how often it was read: the 2010 tests' `timeMaker` list.
#[derive(Debug)]
pub struct ScriptedClock {
    readings: Mutex<VecDeque<u64>>,
    last: AtomicU64,
    pub reads: AtomicU64,
}

impl ScriptedClock {
    pub fn new(readings: impl IntoIterator<Item = u64>) -> ScriptedClock {
        let readings: VecDeque<u64> = readings.into_iter().collect();
        let first = *readings.front().expect("at least one reading");
        ScriptedClock {
            readings: Mutex::new(readings),
            last: AtomicU64::new(first),
            reads: AtomicU64::new(0),
        }
    }

    pub fn push(&self, reading: u64) {
        self.readings.lock().unwrap().push_back(reading);
    }
}

impl Clock for ScriptedClock {
    fn now_ms(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::SeqCst);
        match self.readings.lock().unwrap().pop_front() {
            Some(reading) => {
                self.last.store(reading, Ordering::SeqCst);
                reading
            }
            None => self.last.load(Ordering::SeqCst),
        }
    }
}
