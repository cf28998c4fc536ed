//! A transform whose streams live in a fixed table: it counts each stream's
//! text bytes and logs the count at the end. Config: none. When all SLOTS
//! streams of an instance are open it refuses the next with
//! OPEN_NO_ROOM_REASON: the host fails only that stream (no capacity) and
//! does not count it against the plugin.
use retryhost::{log_info, Config, Part, PartKind, Stream, StreamInfo, Transform, Verdict, OPEN_NO_ROOM_REASON};

const SLOTS: usize = 2;

struct Counter {
    bytes: usize,
}

impl Stream for Counter {
    fn part(&mut self, p: &Part) -> Result<Verdict<'_>, String> {
        if p.kind == PartKind::TEXT_DELTA {
            self.bytes += p.delta.len();
        }
        Ok(Verdict::Pass)
    }

    fn end(&mut self) -> Result<Verdict<'_>, String> {
        log_info(&format!("text bytes: {}", self.bytes));
        Ok(Verdict::Pass)
    }
}

struct Table {
    open: usize,
}

impl Transform for Table {
    type Stream = Counter;

    fn open(&mut self, _: &StreamInfo) -> Result<Counter, String> {
        if self.open == SLOTS {
            return Err(OPEN_NO_ROOM_REASON.into());
        }
        self.open += 1;
        Ok(Counter { bytes: 0 })
    }

    // The SDK hands every opened stream back here exactly once: its slot
    // is free again.
    fn close(&mut self, _: Counter) { self.open -= 1; }
}

fn new(config: &Config) -> Result<Table, String> {
    if !config.bytes.is_empty() {
        return Err("config: this transform takes none".into());
    }
    Ok(Table { open: 0 })
}

retryhost::transform!(Table, new);
