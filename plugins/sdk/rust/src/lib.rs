//! The Rust guest SDK for retryhost plugins (ABI v1, abi/ABI.md): write a
//! condition or a transform as plain Rust, name it in one macro, build it
//! for `wasm32-unknown-unknown`. The crate has no dependencies.
//!
//! ```ignore
//! use retryhost::{Attempt, Config, Decider, Decision};
//!
//! struct Rule;
//! impl Decider for Rule {
//!     fn decide(&self, a: &Attempt) -> Result<Decision, String> {
//!         Ok(if a.status == 429 { Decision::retry(0) } else { Decision::none() })
//!     }
//! }
//! fn new(_: &Config) -> Result<Rule, String> { Ok(Rule) }
//! retryhost::condition!(Rule, new);
//! ```
//!
//! The SDK registers a 64 KiB scratch buffer, decodes the records (in
//! place: a part's strings borrow the buffer), encodes the answers,
//! declares the policy (with a transform's static verdicts and
//! auto_close) and closes a decided stream itself. A transform's streams
//! are kept by value in a table indexed by the host's dense handles: no
//! allocation per stream or per part unless the plugin makes one.
//!
//! Build (the flags of plugins/Makefile; rustc from Debian's `rustc` and
//! `libstd-rust-dev-wasm32`):
//!
//! ```sh
//! rustc --edition 2021 --crate-type rlib --target wasm32-unknown-unknown -C opt-level=3 -C panic=abort src/lib.rs
//! rustc --edition 2021 --crate-type cdylib --target wasm32-unknown-unknown -C opt-level=3 -C panic=abort \
//!   --extern retryhost=libretryhost.rlib my.rs
//! ```

#![allow(clippy::missing_safety_doc)]

use std::borrow::Cow;
use std::collections::BTreeMap;

pub mod json;
pub use json::JsonReader;

// ---- the ABI's numbers (ABI.md §5, §8) ----

/// The class of a failed attempt (ABI.md §8.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ErrorClass(pub u8);
impl ErrorClass {
    pub const NONE: Self = Self(0);
    pub const UNKNOWN: Self = Self(1);
    pub const TIMEOUT: Self = Self(2);
    pub const CANCELED: Self = Self(3);
    pub const RATE_LIMIT: Self = Self(4);
    pub const OVERLOADED: Self = Self(5);
    pub const SERVER: Self = Self(6);
    pub const CLIENT: Self = Self(7);
    pub const AUTH: Self = Self(8);
    pub const CONTEXT_LENGTH: Self = Self(9);
    pub const CONTENT_FILTER: Self = Self(10);
    pub const REFUSAL: Self = Self(11);
    pub const NETWORK: Self = Self(12);
    pub const TRANSFORM: Self = Self(13);
    pub const PLUGIN: Self = Self(14);
}

/// Which deadline fired, for [`ErrorClass::TIMEOUT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Deadline(pub u8);
impl Deadline {
    pub const NONE: Self = Self(0);
    pub const FIRST_CONTENT: Self = Self(1);
    pub const ATTEMPT: Self = Self(2);
    pub const TOTAL: Self = Self(3);
    pub const GAP: Self = Self(4);
}

/// The unified finish reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Reason(pub u8);
impl Reason {
    pub const UNKNOWN: Self = Self(0);
    pub const STOP: Self = Self(1);
    pub const LENGTH: Self = Self(2);
    pub const CONTENT_FILTER: Self = Self(3);
    pub const TOOL_CALLS: Self = Self(4);
    pub const ERROR: Self = Self(5);
    pub const OTHER: Self = Self(6);
    pub const REFUSAL: Self = Self(7);
}

/// A condition's action (ABI.md §8.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Action(pub u8);
impl Action {
    pub const NONE: Self = Self(0);
    pub const RETRY: Self = Self(1);
    pub const SWITCH: Self = Self(2);
    pub const GIVE_UP: Self = Self(3);
}

/// The kind of a stream part (ABI.md §8.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct PartKind(pub u8);
impl PartKind {
    pub const INVALID: Self = Self(0);
    pub const STREAM_START: Self = Self(1);
    pub const RESPONSE_META: Self = Self(2);
    pub const TEXT_START: Self = Self(3);
    pub const TEXT_DELTA: Self = Self(4);
    pub const TEXT_END: Self = Self(5);
    pub const REASONING_START: Self = Self(6);
    pub const REASONING_DELTA: Self = Self(7);
    pub const REASONING_END: Self = Self(8);
    pub const TOOL_INPUT_START: Self = Self(9);
    pub const TOOL_INPUT_DELTA: Self = Self(10);
    pub const TOOL_INPUT_END: Self = Self(11);
    pub const TOOL_CALL: Self = Self(12);
    pub const TOOL_RESULT: Self = Self(13);
    pub const FILE: Self = Self(14);
    pub const SOURCE: Self = Self(15);
    pub const FINISH: Self = Self(16);
    pub const RAW: Self = Self(17);
    pub const ERROR: Self = Self(18);
    /// The number of kinds v1.3 defines, kind 0 included.
    pub const COUNT: u8 = 19;

    fn is_tool(self) -> bool {
        self == Self::TOOL_INPUT_START || self == Self::TOOL_CALL || self == Self::TOOL_RESULT
    }
}

/// The action of a transform's verdict (ABI.md §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PartAction(pub u8);
impl PartAction {
    pub const PASS: Self = Self(0);
    pub const HOLD: Self = Self(1);
    pub const ERROR: Self = Self(2);
    pub const DROP: Self = Self(3);
    pub const REPLACE: Self = Self(4);
    pub const DETACH: Self = Self(5);
}

/// A plugin's fail policy (ABI.md §8.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FailPolicy(pub u8);
impl FailPolicy {
    pub const OPEN: Self = Self(0);
    pub const CLOSED: Self = Self(1);
}

/// What the host does when a hold cap is hit (ABI.md §8.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CapAction(pub u8);
impl CapAction {
    pub const DEFAULT: Self = Self(0);
    pub const FAIL: Self = Self(1);
    pub const FLUSH: Self = Self(2);
}

/// retryhost_open's answer for "no room for another stream" (ABI.md §6.3):
/// return it as `Err(OPEN_NO_ROOM_REASON)` from [`Transform::open`].
pub const OPEN_NO_ROOM: i32 = -6;
/// The reason [`Transform::open`] gives to answer [`OPEN_NO_ROOM`].
pub const OPEN_NO_ROOM_REASON: &str = "no room";

/// Log levels: slog's numbers.
pub mod level {
    pub const DEBUG: i32 = -4;
    pub const INFO: i32 = 0;
    pub const WARN: i32 = 4;
    pub const ERROR: i32 = 8;
}

// ---- the host's imports (ABI.md §4) ----

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "retryhost_v1")]
extern "C" {
    #[link_name = "buffer"]
    fn host_buffer(ptr: *mut u8, cap: i32) -> i32;
    #[link_name = "input"]
    fn host_input(ptr: *mut u8, cap: i32) -> i32;
    #[link_name = "policy"]
    fn host_policy(ptr: *const u8, len: i32) -> i32;
    #[link_name = "log"]
    fn host_log(level: i32, ptr: *const u8, len: i32);
}

// Natively (cargo test of a plugin's logic) the imports do nothing.
#[cfg(not(target_arch = "wasm32"))]
unsafe fn host_buffer(_: *mut u8, _: i32) -> i32 { 0 }
#[cfg(not(target_arch = "wasm32"))]
unsafe fn host_input(_: *mut u8, _: i32) -> i32 { 0 }
#[cfg(not(target_arch = "wasm32"))]
unsafe fn host_policy(_: *const u8, _: i32) -> i32 { 0 }
#[cfg(not(target_arch = "wasm32"))]
unsafe fn host_log(_: i32, _: *const u8, _: i32) {}

/// log writes one line to the host's logger (cut at 1024 bytes; a budget
/// of lines per plugin: log events, not parts).
pub fn log(level: i32, msg: &str) {
    let b = &msg.as_bytes()[..msg.len().min(1024)];
    if !b.is_empty() {
        unsafe { host_log(level, b.as_ptr(), b.len() as i32) }
    }
}
pub fn log_debug(msg: &str) { log(level::DEBUG, msg) }
pub fn log_info(msg: &str) { log(level::INFO, msg) }
pub fn log_warn(msg: &str) { log(level::WARN, msg) }
pub fn log_error(msg: &str) { log(level::ERROR, msg) }

// ---- little-endian records ----

#[inline]
fn rd16(b: &[u8], at: usize) -> u16 { u16::from_le_bytes([b[at], b[at + 1]]) }
#[inline]
fn rd32(b: &[u8], at: usize) -> u32 { u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) }
#[inline]
fn rd64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Reader walks a record, remembering a failure.
struct Reader<'a> {
    b: &'a [u8],
    off: usize,
    ok: bool,
}

impl<'a> Reader<'a> {
    fn need(&mut self, k: usize) -> bool {
        if !self.ok || self.b.len() - self.off < k {
            self.ok = false;
        }
        self.ok
    }
    fn u8(&mut self) -> u8 {
        if !self.need(1) { return 0 }
        self.off += 1;
        self.b[self.off - 1]
    }
    fn u32(&mut self) -> u32 {
        if !self.need(4) { return 0 }
        self.off += 4;
        rd32(self.b, self.off - 4)
    }
    fn u64(&mut self) -> u64 {
        if !self.need(8) { return 0 }
        self.off += 8;
        rd64(self.b, self.off - 8)
    }
    fn bytes(&mut self) -> &'a [u8] {
        let n = self.u32() as usize;
        if !self.ok || n > self.b.len() - self.off {
            self.ok = false;
            return &[];
        }
        self.off += n;
        &self.b[self.off - n..self.off]
    }
    fn str(&mut self) -> Bytes<'a> { Cow::Borrowed(self.bytes()) }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Bytes is a record's string: UTF-8 as the host sent it (not checked), or
/// bytes a plugin builds. [`lossy`] reads it as text.
pub type Bytes<'a> = Cow<'a, [u8]>;

/// lossy reads bytes as UTF-8, invalid sequences as U+FFFD (borrowed when valid).
pub fn lossy<'b>(b: &'b [u8]) -> Cow<'b, str> { String::from_utf8_lossy(b) }

// ---- records ----

/// Token counts of an attempt or a finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Usage {
    pub input: i64,
    pub output: i64,
    pub cache_read: i64,
    pub cache_write: i64,
    pub reasoning: i64,
}

impl Usage {
    fn read(r: &mut Reader) -> Usage {
        Usage {
            input: r.u64() as i64,
            output: r.u64() as i64,
            cache_read: r.u64() as i64,
            cache_write: r.u64() as i64,
            reasoning: r.u64() as i64,
        }
    }
    fn write(&self, out: &mut Vec<u8>) {
        for v in [self.input, self.output, self.cache_read, self.cache_write, self.reasoning] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// One earlier attempt of the request, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Summary<'a> {
    pub class: ErrorClass,
    pub status: u16,
    /// Nanoseconds.
    pub duration: i64,
    pub model: Bytes<'a>,
}

/// Attempt is what a condition judges (ABI.md §8.1): the attempt that just
/// failed, or a result a rule may reject. Durations are nanoseconds; the
/// strings borrow the scratch buffer (valid during the call only).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Attempt<'a> {
    /// 1-based attempt number.
    pub number: u32,
    /// HTTP status, 0 = none.
    pub status: u16,
    pub class: ErrorClass,
    pub deadline: Deadline,
    /// The provider said the error is retryable.
    pub retryable: bool,
    pub finish_reason: Reason,
    pub elapsed: i64,
    pub duration: i64,
    /// The server's Retry-After in nanoseconds, -1 = absent.
    pub retry_after: i64,
    pub usage: Usage,
    /// "provider/model".
    pub model: Bytes<'a>,
    pub error_name: Bytes<'a>,
    pub message: Bytes<'a>,
    /// The provider's own finish word.
    pub finish_raw: Bytes<'a>,
    pub earlier: Vec<Summary<'a>>,
}

impl<'a> Attempt<'a> {
    /// decode reads an Attempt record; None if it is malformed. Trailing bytes are ignored.
    pub fn decode(b: &'a [u8]) -> Option<Attempt<'a>> {
        if b.len() < 80 {
            return None;
        }
        let mut r = Reader { b, off: 40, ok: true };
        let usage = Usage::read(&mut r);
        let mut a = Attempt {
            number: rd32(b, 0),
            status: rd16(b, 4),
            class: ErrorClass(b[6]),
            deadline: Deadline(b[7]),
            retryable: b[8] & 1 != 0,
            finish_reason: Reason(b[9]),
            elapsed: rd64(b, 16) as i64,
            duration: rd64(b, 24) as i64,
            retry_after: rd64(b, 32) as i64,
            usage,
            model: r.str(),
            error_name: r.str(),
            message: r.str(),
            finish_raw: r.str(),
            earlier: Vec::new(),
        };
        let n = rd32(b, 12) as u64;
        if !r.ok || n * 20 > (b.len() - r.off) as u64 {
            return None;
        }
        for _ in 0..n {
            if !r.need(16) {
                return None;
            }
            let at = r.off;
            r.off += 16;
            let model = r.str();
            a.earlier.push(Summary { class: ErrorClass(b[at]), status: rd16(b, at + 2), duration: rd64(b, at + 8) as i64, model });
        }
        if r.ok { Some(a) } else { None }
    }
}

/// Decision is a condition's answer (ABI.md §8.2). [`Decision::none`] is
/// "no opinion": the next condition decides.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Decision {
    pub action: Action,
    /// Wait the server's Retry-After (when it sent one) instead of delay.
    pub use_retry_after: bool,
    /// Attempts on the target model counting earlier ones, 0 = default.
    pub max_attempts: u32,
    /// Nanoseconds before the next attempt, 0 = default.
    pub delay: i64,
    /// Nanoseconds for the next attempt, 0 = default.
    pub timeout: i64,
    /// Backoff factor per earlier wait, 0 = default.
    pub backoff: f64,
    /// Target of a switch (required there).
    pub model: String,
}

impl Decision {
    /// none is "no opinion".
    pub fn none() -> Decision { Decision::default() }
    /// retry retries on the same model after delay nanoseconds (0: the request's default).
    pub fn retry(delay: i64) -> Decision { Decision { action: Action::RETRY, delay, ..Decision::default() } }
    /// switch_to switches to model (a model key the request knows).
    pub fn switch_to(model: &str) -> Decision {
        Decision { action: Action::SWITCH, model: model.to_string(), ..Decision::default() }
    }
    /// give_up stops retrying.
    pub fn give_up() -> Decision { Decision { action: Action::GIVE_UP, ..Decision::default() } }

    /// encode appends the Decision record.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.action.0, self.use_retry_after as u8, 0, 0]);
        out.extend_from_slice(&self.max_attempts.to_le_bytes());
        out.extend_from_slice(&self.delay.to_le_bytes());
        out.extend_from_slice(&self.timeout.to_le_bytes());
        out.extend_from_slice(&self.backoff.to_bits().to_le_bytes());
        put_bytes(out, self.model.as_bytes());
    }
}

/// StreamInfo describes a stream being opened (ABI.md §8.3).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StreamInfo<'a> {
    /// The driver's stream id (informative).
    pub id: u64,
    /// 1-based attempt number.
    pub attempt: u32,
    pub model: Bytes<'a>,
}

/// Warning is one of a stream start's warnings.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Warning<'a> {
    pub kind: Bytes<'a>,
    pub feature: Bytes<'a>,
    pub message: Bytes<'a>,
}

/// Part is one part of a model's stream (ABI.md §8.4). A part handed to
/// [`Stream::part`] borrows the scratch buffer (valid during the call
/// only, copy what you keep); a part you build to REPLACE with owns or
/// borrows what you give it ([`Part::text`], [`Part::new`] and its fields).
///
/// The tail strings are in `a`…`d`, by kind (the accessors name them):
/// response metadata `a` model id; tool parts `a` name, `b` input, `c`
/// result; file `a` media type, `b` data, `c` url; source `a` url, `b`
/// title, `c` media type, `d` filename; finish `a` the provider's word;
/// error `a` message.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Part<'a> {
    pub kind: PartKind,
    /// Bit 0: a tool result is an error; bit 1: a provider-executed tool.
    pub flags: u8,
    pub id: Bytes<'a>,
    pub delta: Bytes<'a>,
    pub a: Bytes<'a>,
    pub b: Bytes<'a>,
    pub c: Bytes<'a>,
    pub d: Bytes<'a>,
    /// Response metadata: Unix nanoseconds, 0 = none.
    pub timestamp: i64,
    /// Finish: the unified reason and the usage.
    pub reason: Reason,
    pub usage: Usage,
    /// Stream start: the provider's warnings.
    pub warnings: Vec<Warning<'a>>,
}

impl<'a> Part<'a> {
    /// new is an empty part of kind.
    pub fn new(kind: PartKind) -> Part<'a> { Part { kind, ..Part::default() } }

    /// text is a text delta of block id.
    pub fn text(id: impl Into<Bytes<'a>>, delta: impl Into<Bytes<'a>>) -> Part<'a> {
        Part { kind: PartKind::TEXT_DELTA, id: id.into(), delta: delta.into(), ..Part::default() }
    }

    pub fn model_id(&self) -> &[u8] { if self.kind == PartKind::RESPONSE_META { &self.a } else { &[] } }
    pub fn tool_name(&self) -> &[u8] { if self.kind.is_tool() { &self.a } else { &[] } }
    pub fn tool_input(&self) -> &[u8] { if self.kind.is_tool() { &self.b } else { &[] } }
    pub fn tool_result(&self) -> &[u8] { if self.kind.is_tool() { &self.c } else { &[] } }
    pub fn url(&self) -> &[u8] {
        match self.kind {
            PartKind::FILE => &self.c,
            PartKind::SOURCE => &self.a,
            _ => &[],
        }
    }
    pub fn media_type(&self) -> &[u8] {
        match self.kind {
            PartKind::FILE => &self.a,
            PartKind::SOURCE => &self.c,
            _ => &[],
        }
    }
    pub fn file_data(&self) -> &[u8] { if self.kind == PartKind::FILE { &self.b } else { &[] } }
    pub fn title(&self) -> &[u8] { if self.kind == PartKind::SOURCE { &self.b } else { &[] } }
    pub fn filename(&self) -> &[u8] { if self.kind == PartKind::SOURCE { &self.d } else { &[] } }
    pub fn finish_raw(&self) -> &[u8] { if self.kind == PartKind::FINISH { &self.a } else { &[] } }
    pub fn error_message(&self) -> &[u8] { if self.kind == PartKind::ERROR { &self.a } else { &[] } }

    /// decode reads a Part record as the host's decoder does (a known kind,
    /// every field within the record); None if it is malformed. Trailing
    /// bytes are ignored. A text delta costs no allocation.
    pub fn decode(b: &'a [u8]) -> Option<Part<'a>> {
        if b.len() < 4 || b[0] == 0 || b[0] >= PartKind::COUNT {
            return None;
        }
        let mut r = Reader { b, off: 4, ok: true };
        let mut p = Part { kind: PartKind(b[0]), flags: b[1], id: r.str(), delta: r.str(), ..Part::default() };
        match p.kind {
            PartKind::RESPONSE_META => {
                p.a = r.str();
                p.timestamp = r.u64() as i64;
            }
            PartKind::TOOL_INPUT_START | PartKind::TOOL_CALL | PartKind::TOOL_RESULT | PartKind::FILE => {
                p.a = r.str();
                p.b = r.str();
                p.c = r.str();
            }
            PartKind::SOURCE => {
                p.a = r.str();
                p.b = r.str();
                p.c = r.str();
                p.d = r.str();
            }
            PartKind::FINISH => {
                p.reason = Reason(r.u8());
                p.a = r.str();
                p.usage = Usage::read(&mut r);
            }
            PartKind::STREAM_START => {
                let n = r.u32() as u64;
                if !r.ok || n * 12 > (b.len() - r.off) as u64 {
                    return None;
                }
                for _ in 0..n {
                    let w = Warning { kind: r.str(), feature: r.str(), message: r.str() };
                    p.warnings.push(w);
                }
            }
            PartKind::ERROR => p.a = r.str(),
            _ => {}
        }
        if r.ok { Some(p) } else { None }
    }

    /// encode appends the Part record.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.kind.0, self.flags, 0, 0]);
        put_bytes(out, &self.id);
        put_bytes(out, &self.delta);
        match self.kind {
            PartKind::RESPONSE_META => {
                put_bytes(out, &self.a);
                out.extend_from_slice(&self.timestamp.to_le_bytes());
            }
            PartKind::TOOL_INPUT_START | PartKind::TOOL_CALL | PartKind::TOOL_RESULT | PartKind::FILE => {
                put_bytes(out, &self.a);
                put_bytes(out, &self.b);
                put_bytes(out, &self.c);
            }
            PartKind::SOURCE => {
                for s in [&self.a, &self.b, &self.c, &self.d] {
                    put_bytes(out, s);
                }
            }
            PartKind::FINISH => {
                out.push(self.reason.0);
                put_bytes(out, &self.a);
                self.usage.write(out);
            }
            PartKind::STREAM_START => {
                out.extend_from_slice(&(self.warnings.len() as u32).to_le_bytes());
                for w in &self.warnings {
                    put_bytes(out, &w.kind);
                    put_bytes(out, &w.feature);
                    put_bytes(out, &w.message);
                }
            }
            PartKind::ERROR => put_bytes(out, &self.a),
            _ => {}
        }
    }
}

/// PartError is what an ERROR verdict fails the attempt with (ABI.md §8.5):
/// a transform error (class CONTENT_FILTER or TRANSFORM, anything else
/// reads as TRANSFORM; a code of the plugin's; a message) or a refusal (the
/// phrase that matched and the text held when it did).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PartError<'a> {
    pub refusal: bool,
    pub class: ErrorClass,
    pub code: u32,
    pub message: Bytes<'a>,
    pub phrase: Bytes<'a>,
    pub text: Bytes<'a>,
}

impl<'a> PartError<'a> {
    /// transform is a transform error of class TRANSFORM.
    pub fn transform(message: impl Into<Bytes<'a>>, code: u32) -> PartError<'a> {
        PartError { class: ErrorClass::TRANSFORM, code, message: message.into(), ..PartError::default() }
    }
    /// refusal is a refusal: the normalised phrase that matched and the text held when it did.
    pub fn refusal(phrase: impl Into<Bytes<'a>>, text: impl Into<Bytes<'a>>) -> PartError<'a> {
        PartError { refusal: true, class: ErrorClass::REFUSAL, phrase: phrase.into(), text: text.into(), ..PartError::default() }
    }
    /// encode appends the Error record.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.refusal as u8, self.class.0, 0, 0]);
        out.extend_from_slice(&self.code.to_le_bytes());
        put_bytes(out, &self.message);
        put_bytes(out, &self.phrase);
        put_bytes(out, &self.text);
    }
}

/// Verdict is a transform's answer to a part or to the end of a stream.
/// To fail instead (the plugin's fail policy applies), return `Err`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Release the hold queue, then the part.
    Pass,
    /// Append the part to the hold queue.
    Hold,
    /// Discard the queue and fail the attempt with the error.
    Error(PartError<'a>),
    /// Discard the part, keep the queue.
    Drop,
    /// Discard queue and part (not the framing) and emit these (content kinds only).
    Replace(Vec<Part<'a>>),
    /// Release queue and part; later parts pass without calls.
    Detach,
}

impl<'a> Verdict<'a> {
    pub fn action(&self) -> PartAction {
        match self {
            Verdict::Pass => PartAction::PASS,
            Verdict::Hold => PartAction::HOLD,
            Verdict::Error(_) => PartAction::ERROR,
            Verdict::Drop => PartAction::DROP,
            Verdict::Replace(_) => PartAction::REPLACE,
            Verdict::Detach => PartAction::DETACH,
        }
    }
}

/// Policy is what a plugin declares at load (ABI.md §8.7): its fail
/// policy, its hold caps (0 = the host's default; they may only tighten
/// it), what to do at a cap, and, for a transform, how many streams one
/// instance can hold (0 = not declared).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Policy {
    pub fail: FailPolicy,
    pub on_cap: CapAction,
    pub max_held_parts: u32,
    pub max_held_bytes: u32,
    /// Nanoseconds.
    pub max_hold_time: i64,
    pub max_streams: u32,
}

/// Config is the operator's config: raw bytes, whose format is the
/// plugin's. A factory rejects it by returning `Err(reason)`: the load
/// fails with that reason.
pub struct Config {
    pub bytes: Vec<u8>,
}

impl Config {
    /// text is the config as text (invalid UTF-8 as U+FFFD).
    pub fn text(&self) -> Cow<'_, str> { lossy(&self.bytes) }
    /// json is a strict JSON reader over the config (see [`JsonReader`]).
    pub fn json(&self) -> JsonReader<'_> { JsonReader::new(&self.bytes) }
}

// ---- what a plugin implements ----

/// Decider is a condition's logic. `Ok(Decision::none())` is "no
/// opinion"; `Err(reason)` is a failure of the plugin (its fail policy
/// applies; the reason is logged at warn), not a decision. Keep no state
/// between calls: the host runs several instances and replaces them at
/// will (ABI.md §2).
pub trait Decider {
    fn decide(&self, a: &Attempt) -> Result<Decision, String>;
    /// policy is declared at load (only its fail field applies to a condition).
    fn policy(&self) -> Option<Policy> { None }
}

/// Stream is one stream's state. The host pins a stream to one instance
/// and calls it in stream order, one call at a time. `part` judges the
/// next part; `end` resolves what is still held when the upstream ended
/// cleanly (HOLD there means PASS). `Err(reason)` is a failure of the
/// plugin (its fail policy applies; the reason is logged at warn). The
/// verdict may borrow the stream (an error's text, say): the SDK encodes
/// it before the call returns.
pub trait Stream {
    fn part(&mut self, p: &Part) -> Result<Verdict<'_>, String>;
    fn end(&mut self) -> Result<Verdict<'_>, String> { Ok(Verdict::Pass) }
}

/// A boxed stream is a stream: a transform that recycles large states
/// moves a pointer, not the state.
impl<S: Stream + ?Sized> Stream for Box<S> {
    fn part(&mut self, p: &Part) -> Result<Verdict<'_>, String> { (**self).part(p) }
    fn end(&mut self) -> Result<Verdict<'_>, String> { (**self).end() }
}

/// Transform opens one Stream per stream. The SDK keeps the streams by
/// value and hands each back to `close` exactly once: right after it
/// answers ERROR or DETACH or fails (auto_close), else when the host
/// closes it; `close` may keep it for a later `open` (a free list makes
/// an open cost no allocation).
///
/// `statics` declares static verdicts: the verdict every part of a kind
/// gets without being read (PASS, HOLD, DROP or DETACH). The host (v1.1),
/// or else the SDK, answers those parts without calling the stream.
pub trait Transform {
    type Stream: Stream;
    /// open returns the new stream's state; `Err` fails the stream (its
    /// fail policy applies), `Err(OPEN_NO_ROOM_REASON.into())` refuses it
    /// for lack of room, which is no failure.
    fn open(&mut self, info: &StreamInfo) -> Result<Self::Stream, String>;
    fn close(&mut self, _s: Self::Stream) {}
    fn policy(&self) -> Option<Policy> { None }
    fn statics(&self) -> Vec<(PartKind, PartAction)> { Vec::new() }
}

// ---- the dispatch ----

/// The guests' dispatch, called by the exports the macros write.
#[doc(hidden)]
pub mod guest {
    use super::*;

    /// The scratch buffer the SDK registers: 64 KiB, static (ABI.md §4.1).
    pub const BUFFER_SIZE: usize = 65536;
    #[repr(C, align(16))]
    pub struct Buf(pub [u8; BUFFER_SIZE]);
    pub static mut BUF: Buf = Buf([0; BUFFER_SIZE]);

    /// A packed verdict that is no action: the host applies the fail policy.
    pub const FAIL_VERDICT: u64 = 0xff;

    #[inline]
    pub fn buf() -> &'static mut [u8; BUFFER_SIZE] { unsafe { &mut BUF.0 } }

    static mut INPUT: Vec<u8> = Vec::new();
    static mut OUT: Vec<u8> = Vec::new();

    /// input returns the call's input: the start of the buffer, or a copy
    /// read with the input import when it did not fit.
    pub fn input(n: i32) -> Option<&'static [u8]> {
        if n < 0 {
            return None;
        }
        let n = n as usize;
        if n <= BUFFER_SIZE {
            return Some(&buf()[..n]);
        }
        let v = unsafe { &mut INPUT };
        v.resize(n, 0);
        if unsafe { host_input(v.as_mut_ptr(), n as i32) } != n as i32 {
            return None;
        }
        Some(&v[..])
    }

    fn reject(msg: &str) -> i32 {
        let b = &msg.as_bytes()[..msg.len().min(1024)];
        if b.is_empty() {
            return -1;
        }
        buf()[..b.len()].copy_from_slice(b);
        b.len() as i32
    }

    /// What a kind's factory leaves for init to declare.
    pub struct Declared {
        pub policy: Option<Policy>,
        pub statics: Option<Vec<(PartKind, PartAction)>>,
    }

    /// init answers retryhost_init: it registers the buffer, reads the
    /// config, runs the kinds' factories (each returns what it declares)
    /// and declares the policy.
    pub fn init(len: i32, kinds: &mut [&mut dyn FnMut(&Config) -> Result<Declared, String>]) -> i32 {
        unsafe {
            if host_buffer(BUF.0.as_mut_ptr(), BUFFER_SIZE as i32) != 0 {
                return -1;
            }
        }
        if len < 0 {
            return -1;
        }
        let mut cfg = Config { bytes: vec![0; len as usize] };
        if len > 0 && unsafe { host_input(cfg.bytes.as_mut_ptr(), len) } != len {
            return reject("config: could not be read");
        }
        let mut pol: Option<Policy> = None;
        let mut statics: Option<Vec<(PartKind, PartAction)>> = None;
        for k in kinds.iter_mut() {
            match k(&cfg) {
                Err(e) => return reject(if e.is_empty() { "config rejected" } else { &e }),
                Ok(d) => {
                    if d.policy.is_some() {
                        pol = d.policy;
                    }
                    if d.statics.is_some() {
                        statics = d.statics;
                    }
                }
            }
        }
        cfg.bytes = Vec::new();
        if pol.is_none() && statics.is_none() {
            return 0;
        }
        let p = pol.unwrap_or_default();
        // The Policy record (ABI.md §8.7), with the v1.1 hints for a
        // transform: auto_close and the static verdicts, then max_streams.
        let mut rec = Vec::with_capacity(64);
        rec.extend_from_slice(&[p.fail.0, p.on_cap.0, 0, 0]);
        rec.extend_from_slice(&p.max_held_parts.to_le_bytes());
        rec.extend_from_slice(&p.max_held_bytes.to_le_bytes());
        rec.extend_from_slice(&0u32.to_le_bytes());
        rec.extend_from_slice(&p.max_hold_time.max(0).to_le_bytes());
        if let Some(st) = statics {
            let mut table = [0xffu8; 256];
            let mut n = 0usize;
            for (k, a) in st {
                if a != PartAction::PASS && a != PartAction::HOLD && a != PartAction::DROP && a != PartAction::DETACH {
                    return reject("static verdicts: only pass, hold, drop and detach can be static");
                }
                if k == PartKind::INVALID {
                    return reject("static verdicts: kind 0 is invalid");
                }
                table[k.0 as usize] = a.0;
                n = n.max(k.0 as usize + 1);
            }
            unsafe { STATICS = table };
            rec.extend_from_slice(&1u32.to_le_bytes()); // auto_close
            rec.extend_from_slice(&(n as u32).to_le_bytes());
            rec.extend_from_slice(&table[..n]);
            if p.max_streams > 0 {
                rec.extend_from_slice(&p.max_streams.to_le_bytes());
            }
        }
        let st = unsafe { host_policy(rec.as_ptr(), rec.len() as i32) };
        if st < 0 {
            return reject(&format!("policy refused by the host: status {}", st));
        }
        0
    }

    /// The static verdicts by kind (0xff: call the stream).
    pub static mut STATICS: [u8; 256] = [0xff; 256];

    /// declare_condition is what a condition declares.
    pub fn declare_condition<D: Decider>(d: &D) -> Declared { Declared { policy: d.policy(), statics: None } }

    /// declare_transform is what a transform declares.
    pub fn declare_transform<T: Transform>(t: &T) -> Declared {
        Declared { policy: t.policy(), statics: Some(t.statics()) }
    }

    /// decide answers retryhost_decide.
    pub fn decide<D: Decider>(d: &D, n: i32) -> i32 {
        let a = match input(n).and_then(Attempt::decode) {
            Some(a) => a,
            None => return -1,
        };
        match d.decide(&a) {
            Err(e) => {
                log(level::WARN, &e);
                -1
            }
            Ok(r) if r.action == Action::NONE => 0,
            Ok(r) => {
                let out = unsafe { &mut OUT };
                out.clear();
                r.encode(out);
                if out.len() > BUFFER_SIZE {
                    return -1;
                }
                buf()[..out.len()].copy_from_slice(out);
                out.len() as i32
            }
        }
    }

    /// Streams is a transform's open streams, by handle: dense handles in
    /// a table (ABI.md §6.3), others (a host that does not reuse them) in
    /// a map.
    pub struct Streams<T: Transform> {
        pub t: T,
        dense: Vec<Option<T::Stream>>,
        far: BTreeMap<i64, T::Stream>,
        done: Vec<i64>,
    }

    const MAX_DENSE: i64 = 1 << 16;

    /// The room a batch keeps for the next result's payload (ABI.md §6.3).
    pub const BATCH_RESERVE: usize = 4096;

    impl<T: Transform> Streams<T> {
        pub fn new(t: T) -> Self { Streams { t, dense: Vec::new(), far: BTreeMap::new(), done: Vec::new() } }

        fn get(&mut self, h: i64) -> Option<&mut T::Stream> {
            if h >= 1 && h <= self.dense.len() as i64 {
                return self.dense[(h - 1) as usize].as_mut();
            }
            self.far.get_mut(&h)
        }

        fn take(&mut self, h: i64) -> Option<T::Stream> {
            if h >= 1 && h <= self.dense.len() as i64 {
                return self.dense[(h - 1) as usize].take();
            }
            self.far.remove(&h)
        }

        fn forget(&mut self, h: i64) {
            if let Some(s) = self.take(h) {
                self.t.close(s);
            }
        }

        /// open answers retryhost_open.
        pub fn open(&mut self, h: i64, n: i32) -> i32 {
            if h < 1 || self.get(h).is_some() {
                return -1;
            }
            let rec = match input(n) {
                Some(r) if r.len() >= 16 => r,
                _ => return -1,
            };
            let ml = rd32(rec, 12) as usize;
            if ml > rec.len() - 16 {
                return -1;
            }
            let info = StreamInfo { id: rd64(rec, 0), attempt: rd32(rec, 8), model: Cow::Borrowed(&rec[16..16 + ml]) };
            let s = match self.t.open(&info) {
                Ok(s) => s,
                Err(e) if e == OPEN_NO_ROOM_REASON => return OPEN_NO_ROOM,
                Err(e) => {
                    log(level::WARN, &e);
                    return -1;
                }
            };
            if h > MAX_DENSE {
                self.far.insert(h, s);
            } else {
                if self.dense.len() < h as usize {
                    self.dense.resize_with(h as usize, || None);
                }
                self.dense[(h - 1) as usize] = Some(s);
            }
            0
        }

        /// open_part answers retryhost_open_part (v1.1).
        pub fn open_part(&mut self, h: i64, info_len: i32, part_len: i32) -> u64 {
            let at = ((info_len as u32 as usize) + 7) & !7;
            if info_len < 0 || part_len < 0 || at + part_len as usize > BUFFER_SIZE {
                return FAIL_VERDICT;
            }
            match self.open(h, info_len) {
                0 => {}
                OPEN_NO_ROOM => return OPEN_NO_ROOM as i64 as u64,
                _ => return FAIL_VERDICT,
            }
            let rec = &buf()[at..at + part_len as usize];
            self.judge(h, rec, 0)
        }

        /// part answers retryhost_part.
        pub fn part(&mut self, h: i64, n: i32) -> u64 {
            if self.get(h).is_none() {
                return FAIL_VERDICT;
            }
            match input(n) {
                Some(rec) => self.judge(h, rec, 0),
                None => FAIL_VERDICT,
            }
        }

        // judge runs stream h's part on rec and returns the packed verdict,
        // its payload written at BUF[off..]. After ERROR, DETACH or a
        // failure the stream is forgotten and closed (auto_close).
        fn judge(&mut self, h: i64, rec: &'static [u8], off: usize) -> u64 {
            if rec.len() < 4 {
                self.forget(h);
                return FAIL_VERDICT;
            }
            let st = unsafe { STATICS[rec[0] as usize] };
            if st != 0xff {
                if PartAction(st) == PartAction::DETACH {
                    self.forget(h);
                }
                return st as u64;
            }
            let p = match Part::decode(rec) {
                Some(p) => p,
                None => {
                    self.forget(h);
                    return FAIL_VERDICT;
                }
            };
            let s = match self.get(h) {
                Some(s) => s,
                None => return FAIL_VERDICT,
            };
            let packed = match s.part(&p) {
                Ok(Verdict::Pass) => return PartAction::PASS.0 as u64,
                Ok(Verdict::Hold) => return PartAction::HOLD.0 as u64,
                Ok(Verdict::Drop) => return PartAction::DROP.0 as u64,
                Ok(v) => encode(&v, off),
                Err(e) => {
                    log(level::WARN, &e);
                    FAIL_VERDICT
                }
            };
            let a = PartAction(packed as u8);
            if packed == FAIL_VERDICT || a == PartAction::ERROR || a == PartAction::DETACH {
                self.forget(h);
            }
            packed
        }

        /// end answers retryhost_end.
        pub fn end(&mut self, h: i64) -> u64 {
            let s = match self.get(h) {
                Some(s) => s,
                None => return FAIL_VERDICT,
            };
            let packed = match s.end() {
                Ok(v) => encode(&v, 0),
                Err(e) => {
                    log(level::WARN, &e);
                    FAIL_VERDICT
                }
            };
            let a = PartAction(packed as u8);
            if packed == FAIL_VERDICT || a == PartAction::ERROR || a == PartAction::DETACH {
                self.forget(h);
            }
            packed
        }

        /// close answers retryhost_close; a handle not held (auto_close) is ignored.
        pub fn close(&mut self, h: i64) { self.forget(h) }

        /// parts answers retryhost_parts.
        pub fn parts(&mut self, count: i32, in_len: i32) -> i32 {
            if count < 0 || in_len < 0 || in_len as usize > BUFFER_SIZE {
                return -1;
            }
            let in_len = in_len as usize;
            self.done.clear();
            let mut at = (in_len + 7) & !7;
            let mut off = 0usize;
            for i in 0..count {
                if at + 8 + BATCH_RESERVE > BUFFER_SIZE {
                    return i; // the host sends entries i… again
                }
                if off + 12 > in_len {
                    return -1;
                }
                let b = buf();
                let h = rd64(b, off) as i64;
                let ln = rd32(b, off + 8) as usize;
                off += 12;
                if ln > in_len - off {
                    return -1;
                }
                let rec: &'static [u8] = unsafe { core::slice::from_raw_parts(BUF.0.as_ptr().add(off), ln) };
                off += ln;
                let packed = if self.done.contains(&h) {
                    PartAction::PASS.0 as u64 // decided earlier in this batch: ignored
                } else {
                    if self.get(h).is_none() {
                        return -1;
                    }
                    let v = self.judge(h, rec, at + 8);
                    if v == FAIL_VERDICT {
                        return -1;
                    }
                    let a = PartAction(v as u8);
                    if a == PartAction::ERROR || a == PartAction::DETACH {
                        self.done.push(h);
                    }
                    v
                };
                buf()[at..at + 8].copy_from_slice(&packed.to_le_bytes());
                at += 8 + (packed >> 32) as usize;
            }
            count
        }
    }

    // encode writes v's payload at BUF[off..] and returns it packed. The
    // payload is built in a separate buffer first: a received part may
    // borrow the bytes it overwrites.
    fn encode(v: &Verdict, off: usize) -> u64 {
        let out = unsafe { &mut OUT };
        out.clear();
        match v {
            Verdict::Error(e) => e.encode(out),
            Verdict::Replace(ps) => {
                out.extend_from_slice(&(ps.len() as u32).to_le_bytes());
                for p in ps {
                    let at = out.len();
                    out.extend_from_slice(&[0; 4]);
                    p.encode(out);
                    let n = (out.len() - at - 4) as u32;
                    out[at..at + 4].copy_from_slice(&n.to_le_bytes());
                }
            }
            _ => return v.action().0 as u64,
        }
        if out.len() > BUFFER_SIZE - off {
            return FAIL_VERDICT;
        }
        buf()[off..off + out.len()].copy_from_slice(out);
        (out.len() as u64) << 32 | v.action().0 as u64
    }
}

/// condition! makes a Decider type the plugin's condition: `condition!(Type, factory)`
/// with `factory: fn(&Config) -> Result<Type, String>`. It writes the exports.
#[macro_export]
macro_rules! condition {
    ($t:ty, $factory:expr) => {
        $crate::__exports!(condition: ($t, $factory));
    };
}

/// transform! makes a Transform type the plugin's transform: `transform!(Type, factory)`
/// with `factory: fn(&Config) -> Result<Type, String>`. It writes the exports.
#[macro_export]
macro_rules! transform {
    ($t:ty, $factory:expr) => {
        $crate::__exports!(transform: ($t, $factory));
    };
}

/// plugin! makes a plugin both a condition and a transform:
/// `plugin!(condition: (D, new_d), transform: (T, new_t))`.
#[macro_export]
macro_rules! plugin {
    (condition: ($d:ty, $fd:expr), transform: ($t:ty, $ft:expr)) => {
        $crate::__exports!(condition: ($d, $fd), transform: ($t, $ft));
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __exports {
    ($(condition: ($d:ty, $fd:expr))? $(,)? $(transform: ($t:ty, $ft:expr))?) => {
        $(static mut __RH_CONDITION: Option<$d> = None;
        #[no_mangle]
        pub extern "C" fn retryhost_decide(n: i32) -> i32 {
            match unsafe { __RH_CONDITION.as_ref() } {
                Some(d) => $crate::guest::decide(d, n),
                None => -1,
            }
        })?
        $(static mut __RH_TRANSFORM: Option<$crate::guest::Streams<$t>> = None;
        fn __rh_streams() -> Option<&'static mut $crate::guest::Streams<$t>> { unsafe { __RH_TRANSFORM.as_mut() } }
        #[no_mangle]
        pub extern "C" fn retryhost_open(h: i64, n: i32) -> i32 {
            __rh_streams().map_or(-1, |s| s.open(h, n))
        }
        #[no_mangle]
        pub extern "C" fn retryhost_open_part(h: i64, info: i32, part: i32) -> i64 {
            __rh_streams().map_or(0xff, |s| s.open_part(h, info, part)) as i64
        }
        #[no_mangle]
        pub extern "C" fn retryhost_part(h: i64, n: i32) -> i64 {
            __rh_streams().map_or(0xff, |s| s.part(h, n)) as i64
        }
        #[no_mangle]
        pub extern "C" fn retryhost_parts(count: i32, n: i32) -> i32 {
            __rh_streams().map_or(-1, |s| s.parts(count, n))
        }
        #[no_mangle]
        pub extern "C" fn retryhost_end(h: i64) -> i64 {
            __rh_streams().map_or(0xff, |s| s.end(h)) as i64
        }
        #[no_mangle]
        pub extern "C" fn retryhost_close(h: i64) {
            if let Some(s) = __rh_streams() {
                s.close(h)
            }
        })?

        /// The ABI version marker: present, never called.
        #[no_mangle]
        pub extern "C" fn retryhost_abi_v1() {}

        #[no_mangle]
        pub extern "C" fn retryhost_init(len: i32) -> i32 {
            $crate::guest::init(len, &mut [
                $(&mut |c: &$crate::Config| {
                    let f: fn(&$crate::Config) -> Result<$d, String> = $fd;
                    let d = f(c)?;
                    let decl = $crate::guest::declare_condition(&d);
                    unsafe { __RH_CONDITION = Some(d) };
                    Ok(decl)
                },)?
                $(&mut |c: &$crate::Config| {
                    let f: fn(&$crate::Config) -> Result<$t, String> = $ft;
                    let t = f(c)?;
                    let decl = $crate::guest::declare_transform(&t);
                    unsafe { __RH_TRANSFORM = Some($crate::guest::Streams::new(t)) };
                    Ok(decl)
                },)?
            ])
        }
    };
}
