//! A transform: replace every "secret" in text deltas with "******".
//! Config: none. Fail-closed: a redaction that fails must not leak.
use retryhost::{lossy, Config, FailPolicy, Part, PartAction, PartKind, Policy, Stream, StreamInfo, Transform, Verdict};

struct Redact;

impl Stream for Redact {
    fn part(&mut self, p: &Part) -> Result<Verdict<'_>, String> {
        // p.kind is always a text delta here: every other kind is PASSed
        // by the static verdicts below, without a call.
        let d = lossy(&p.delta);
        if !d.contains("secret") {
            return Ok(Verdict::Pass);
        }
        let id = p.id.to_vec(); // p borrows the buffer: the verdict owns its copy
        Ok(Verdict::Replace(vec![Part::text(id, d.replace("secret", "******").into_bytes())]))
    }
}

struct Redactor;

impl Transform for Redactor {
    type Stream = Redact;

    fn open(&mut self, _: &StreamInfo) -> Result<Redact, String> { Ok(Redact) }

    fn policy(&self) -> Option<Policy> { Some(Policy { fail: FailPolicy::CLOSED, ..Policy::default() }) }

    fn statics(&self) -> Vec<(PartKind, PartAction)> {
        (1..PartKind::COUNT).map(PartKind).filter(|&k| k != PartKind::TEXT_DELTA).map(|k| (k, PartAction::PASS)).collect()
    }
}

fn new(config: &Config) -> Result<Redactor, String> {
    if !config.bytes.is_empty() {
        return Err("config: this transform takes none".into());
    }
    Ok(Redactor)
}

retryhost::transform!(Redactor, new);
