//! The refusal detector, ported from the C build (plugins/c/refusal.c): it
//! fails an attempt whose leading text is a refusal ("I'm sorry, but I
//! can't…") and detaches as soon as the text cannot become one. It decides
//! byte for byte as refusalcore and the native detector (the vectors and
//! the differential tests in plugins/ check it):
//!   - stream start, response metadata and text start: HOLD;
//!   - a text delta: append it, normalise the text so far; it starts with a
//!     phrase: ERROR with a refusal; it is a prefix of one: HOLD; else DETACH;
//!   - reasoning (kinds 6-8) and source (15): HOLD with "reasoning": "hold",
//!     else DETACH; any other part: DETACH; the end: PASS.
//! Every verdict but a text delta's is declared static, so a v1.1 host
//! sends only text deltas. The phrases are compiled at load into a byte
//! trie stored as a dense transition table: a delta costs one table load
//! per normalised byte, whatever the number of phrases.
//!
//! Config: the JSON of the other builds (plugins/refusal/README.md), with
//! the same limits: phrases, fail, on_cap, max_held_parts, max_held_bytes,
//! max_hold_time, reasoning.
use std::rc::Rc;

use retryhost::json::{utf8_next, utf8_put};
use retryhost::{CapAction, Config, FailPolicy, Part, PartAction, PartError, PartKind, Policy, Stream, StreamInfo, Transform, Verdict};

mod tables;
use tables::{DEFAULT_PHRASES, LOWER_ALT, LOWER_RANGES};

const MAX_CAP: i64 = 2147483647;
const CFG_CAP: usize = 65536;
const MAX_PHRASES: usize = 128;
const PHRASE_BYTES: usize = 8192;
const MAX_PHRASE: usize = 200;
const TEXT_CAP: usize = 1000;

// ---- normalisation (refusalcore.AppendNormalized) ----

/// full reports whether s begins with a complete (or invalid) UTF-8
/// sequence, as Go's utf8.FullRune: only a valid but cut sequence is not.
fn full(s: &[u8]) -> bool {
    let c = s[0];
    let (mut lo, mut hi) = (0x80u8, 0xbfu8);
    if !(0xc2..=0xf4).contains(&c) {
        return true;
    }
    let size = if c < 0xe0 {
        2
    } else if c < 0xf0 {
        if c == 0xe0 {
            lo = 0xa0
        } else if c == 0xed {
            hi = 0x9f
        }
        3
    } else {
        if c == 0xf0 {
            lo = 0x90
        } else if c == 0xf4 {
            hi = 0x8f
        }
        4
    };
    let n = s.len();
    if n >= size {
        return true;
    }
    if n > 1 && (s[1] < lo || s[1] > hi) {
        return true;
    }
    n > 2 && !(0x80..=0xbf).contains(&s[2])
}

fn uspace(r: u32) -> bool {
    matches!(r, 0x85 | 0xa0 | 0x1680 | 0x2000..=0x200a | 0x2028 | 0x2029 | 0x202f | 0x205f | 0x3000)
}

/// ulower is Go's unicode.ToLower over the generated table.
fn ulower(r: u32) -> u32 {
    let (mut lo, mut hi) = (0, LOWER_RANGES.len());
    while lo < hi {
        let m = (lo + hi) / 2;
        let (rlo, rhi, d) = LOWER_RANGES[m];
        if r > rhi {
            lo = m + 1;
        } else if r < rlo {
            hi = m;
        } else if d == LOWER_ALT {
            return rlo + (((r - rlo) & !1) | 1);
        } else {
            return (r as i32 + d) as u32;
        }
    }
    r
}

fn ascii_space(c: u8) -> bool { matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) }

fn fold(r: u32) -> u32 {
    if matches!(r, 0x2018 | 0x2019 | 0x2bc | 0x2032 | 0xff07) {
        b'\'' as u32
    } else {
        ulower(r)
    }
}

/// normalize appends the normalised form of s to d, stopping once d has
/// limit bytes or at a rune split at the end.
fn normalize(s: &[u8], d: &mut Vec<u8>, limit: usize) {
    let mut i = 0;
    let mut space = false;
    while i < s.len() && d.len() < limit {
        let mut r = s[i] as u32;
        if r < 0x80 {
            i += 1;
            if ascii_space(r as u8) {
                space = true;
                continue;
            }
            r = (r as u8).to_ascii_lowercase() as u32;
        } else {
            if !full(&s[i..]) {
                break; // a rune split across deltas: wait
            }
            let (x, size) = utf8_next(&s[i..]);
            i += size;
            if uspace(x) {
                space = true;
                continue;
            }
            r = fold(x);
        }
        if space && !d.is_empty() {
            d.push(b' ');
        }
        space = false;
        let mut b = [0u8; 4];
        let k = utf8_put(&mut b, r);
        d.extend_from_slice(&b[..k]);
    }
}

// ---- the phrases' trie (refusalcore's dfa.go; see refusal.c) ----
//
// next[node * ncls + class(byte)] is the next node (>= 0), or a final
// decision (< 0): -1 diverge, -2-k a match of phrase k that no phrase
// earlier in the list can still override. mat[node] is the first phrase in
// list order the node's path starts with, or -1.

const CLASS_RUNE: u8 = 254; // raw: a byte >= 0x80, decoded as a rune first
const CLASS_SPACE: u8 = 255; // raw: ASCII white space
const NONE: i16 = 0x7fff;

struct Matcher {
    phrases: Vec<Vec<u8>>, // normalised
    cls: [u8; 256],
    raw: [u8; 256],
    spc: u8,
    ncls: usize,
    next: Vec<i16>,
    mat: Vec<i16>,
}

impl Matcher {
    fn compile(phrases: Vec<Vec<u8>>) -> Matcher {
        let mut cls = [0u8; 256];
        let mut ncls = 1usize;
        for p in &phrases {
            for &b in p {
                if cls[b as usize] == 0 {
                    cls[b as usize] = ncls as u8;
                    ncls += 1;
                }
            }
        }
        let mut raw = [0u8; 256];
        for c in 0..256usize {
            raw[c] = if c >= 0x80 {
                CLASS_RUNE
            } else if ascii_space(c as u8) {
                CLASS_SPACE
            } else {
                cls[(c as u8).to_ascii_lowercase() as usize]
            };
        }
        let used: usize = phrases.iter().map(|p| p.len()).sum();
        let mut next = vec![0i16; (used + 1) * ncls];
        let mut mat = vec![NONE; used + 1];
        let mut nnodes = 1usize;
        for (k, p) in phrases.iter().enumerate() {
            let mut n = 0usize;
            for &b in p {
                let at = n * ncls + cls[b as usize] as usize;
                if next[at] == 0 {
                    next[at] = nnodes as i16;
                    nnodes += 1;
                }
                n = next[at] as usize;
            }
            if (k as i16) < mat[n] {
                mat[n] = k as i16;
            }
        }
        // children have higher ids than their parents: below[] (the first
        // phrase ending strictly under a node) flows up in reverse id
        // order, then mat[] (first phrase on the path) down in id order
        let mut below = vec![NONE; nnodes];
        for n in (0..nnodes).rev() {
            let mut b = NONE;
            for c in 0..ncls {
                let ch = next[n * ncls + c] as usize;
                if ch != 0 {
                    b = b.min(mat[ch]).min(below[ch]);
                }
            }
            below[n] = b;
        }
        for n in 0..nnodes {
            for c in 0..ncls {
                let ch = next[n * ncls + c] as usize;
                if ch != 0 && mat[n] < mat[ch] {
                    mat[ch] = mat[n];
                }
            }
        }
        // fold the decisions into the table
        for n in 0..nnodes {
            let fall = if mat[n] == NONE { -1 } else { -2 - mat[n] };
            for c in 0..ncls {
                let t = next[n * ncls + c];
                if t == 0 {
                    next[n * ncls + c] = fall;
                } else if mat[t as usize] != NONE && below[t as usize] > mat[t as usize] {
                    next[n * ncls + c] = -2 - mat[t as usize];
                }
            }
            if mat[n] == NONE {
                mat[n] = -1;
            }
        }
        next.truncate(nnodes * ncls);
        mat.truncate(nnodes);
        Matcher { spc: cls[b' ' as usize], phrases, cls, raw, ncls, next, mat }
    }

    #[inline]
    fn step(&self, node: i32, class: u8) -> i32 { self.next[node as usize * self.ncls + class as usize] as i32 }
}

// ---- per-stream state ----

struct Slot {
    m: Rc<Matcher>,
    len: usize,   // bytes of text
    space: bool,  // a run of white space is pending in the normalisation
    at: usize,    // the next byte of text to normalise
    node: i32,    // the trie node of the normalised text, or a decision < 0
    hold: bool,   // "reasoning": "hold"
    text: [u8; TEXT_CAP],
}

impl Slot {
    /// walk normalises the text from where it stopped and steps each
    /// normalised byte through the trie, until a final decision or a rune
    /// split at the end of the text.
    fn walk(&mut self) {
        let m = &*self.m;
        let s = &self.text[..self.len];
        let (mut i, mut node, mut space) = (self.at, self.node, self.space);
        while i < s.len() && node >= 0 {
            let c = m.raw[s[i] as usize];
            if c < CLASS_RUNE {
                i += 1;
                if space && node != 0 {
                    node = m.step(node, m.spc);
                    if node < 0 {
                        break;
                    }
                }
                space = false;
                node = m.step(node, c);
                continue;
            }
            if c == CLASS_SPACE {
                i += 1;
                space = true;
                continue;
            }
            if !full(&s[i..]) {
                break; // a rune split across deltas: wait
            }
            let (r, size) = utf8_next(&s[i..]);
            i += size;
            if uspace(r) {
                space = true;
                continue;
            }
            if space && node != 0 {
                node = m.step(node, m.spc);
                if node < 0 {
                    break;
                }
            }
            space = false;
            let mut b = [0u8; 4];
            let k = utf8_put(&mut b, fold(r));
            for &x in &b[..k] {
                if node < 0 {
                    break;
                }
                node = m.step(node, m.cls[x as usize]);
            }
        }
        self.at = i;
        self.node = node;
        self.space = space;
    }
}

fn aside(hold: bool, k: PartKind) -> bool {
    hold && matches!(k, PartKind::REASONING_START | PartKind::REASONING_DELTA | PartKind::REASONING_END | PartKind::SOURCE)
}

impl Stream for Slot {
    fn part(&mut self, p: &Part) -> Result<Verdict<'_>, String> {
        match p.kind {
            PartKind::STREAM_START | PartKind::RESPONSE_META | PartKind::TEXT_START => return Ok(Verdict::Hold),
            PartKind::TEXT_DELTA => {}
            k => return Ok(if aside(self.hold, k) { Verdict::Hold } else { Verdict::Detach }),
        }
        // Only the bytes up to TEXT_CAP are judged: undecided there is a failure.
        let take = p.delta.len().min(TEXT_CAP - self.len);
        self.text[self.len..self.len + take].copy_from_slice(&p.delta[..take]);
        self.len += take;
        self.walk();
        let node = self.node;
        let k = if node >= 0 { self.m.mat[node as usize] as i32 } else { -2 - node };
        if k < 0 && node >= 0 && take < p.delta.len() {
            return Err("refusal: more than 1000 bytes of undecided text".into());
        }
        if k < 0 {
            return Ok(if node >= 0 { Verdict::Hold } else { Verdict::Detach });
        }
        // The phrase and the text borrow the stream: no allocation.
        let phrase: &[u8] = &self.m.phrases[k as usize];
        Ok(Verdict::Error(PartError::refusal(phrase, &self.text[..self.len])))
    }
}

struct Detector {
    m: Rc<Matcher>,
    policy: Policy,
    hold: bool,
    free: Vec<Box<Slot>>, // closed streams for reuse: after warm-up an open allocates nothing
}

impl Transform for Detector {
    type Stream = Box<Slot>;

    fn open(&mut self, _: &StreamInfo) -> Result<Box<Slot>, String> {
        if let Some(mut s) = self.free.pop() {
            s.len = 0;
            s.space = false;
            s.at = 0;
            s.node = 0;
            return Ok(s);
        }
        Ok(Box::new(Slot { m: self.m.clone(), len: 0, space: false, at: 0, node: 0, hold: self.hold, text: [0; TEXT_CAP] }))
    }

    fn close(&mut self, s: Box<Slot>) { self.free.push(s) }

    fn policy(&self) -> Option<Policy> { Some(self.policy) }

    fn statics(&self) -> Vec<(PartKind, PartAction)> {
        (1..PartKind::COUNT)
            .map(PartKind)
            .filter(|&k| k != PartKind::TEXT_DELTA)
            .map(|k| (k, if k.0 <= 3 || aside(self.hold, k) { PartAction::HOLD } else { PartAction::DETACH }))
            .collect()
    }
}

/// Phrases normalises and keeps phrases under the limits.
struct Phrases {
    list: Vec<Vec<u8>>,
    used: usize,
}

impl Phrases {
    fn add(&mut self, s: &[u8]) -> Result<(), &'static str> {
        if self.list.len() == MAX_PHRASES {
            return Err("more than 128 phrases");
        }
        let mut n = Vec::new();
        normalize(s, &mut n, MAX_PHRASE + 1);
        if n.is_empty() {
            return Err("a phrase is empty once normalised");
        }
        if n.len() > MAX_PHRASE {
            return Err("a phrase is longer than 200 bytes once normalised");
        }
        if self.used + n.len() > PHRASE_BYTES {
            return Err("the phrases are longer than 8192 bytes in all once normalised");
        }
        self.used += n.len();
        self.list.push(n);
        Ok(())
    }
}

fn new(config: &Config) -> Result<Detector, String> {
    if config.bytes.len() > CFG_CAP {
        return Err("config: longer than 65536 bytes".into());
    }
    let mut policy = Policy::default();
    let mut hold = false;
    let mut phrases = Phrases { list: Vec::new(), used: 0 };
    let mut j = config.json();
    if !j.blank() && j.object_begin() {
        while j.next_key() {
            if j.key_is("phrases") {
                if !j.field() || !j.array_begin() {
                    break;
                }
                while j.next_item() {
                    match j.bytes(CFG_CAP, "too long") {
                        None => break,
                        Some(b) => {
                            if let Err(why) = phrases.add(&b) {
                                j.fail(why);
                            }
                        }
                    }
                }
            } else if j.key_is("fail") {
                if !j.field() {
                    break;
                }
                match j.string(16, "must be \"open\" or \"closed\"").as_str() {
                    "closed" => policy.fail = FailPolicy::CLOSED,
                    "" | "open" => {}
                    _ => {
                        j.fail("must be \"open\" or \"closed\"");
                    }
                }
            } else if j.key_is("on_cap") {
                if !j.field() {
                    break;
                }
                match j.string(16, "must be \"flush\" or \"fail\"").as_str() {
                    "fail" => policy.on_cap = CapAction::FAIL,
                    "flush" => policy.on_cap = CapAction::FLUSH,
                    "" => {}
                    _ => {
                        j.fail("must be \"flush\" or \"fail\"");
                    }
                }
            } else if j.key_is("max_held_parts") {
                if j.field() {
                    policy.max_held_parts = j.integer(MAX_CAP, "want an integer 0-2147483647").unwrap_or(0) as u32;
                }
            } else if j.key_is("max_held_bytes") {
                if j.field() {
                    policy.max_held_bytes = j.integer(MAX_CAP, "want an integer 0-2147483647").unwrap_or(0) as u32;
                }
            } else if j.key_is("max_hold_time") {
                if j.field() {
                    policy.max_hold_time = j.duration("want a non-negative Go duration such as \"10s\"").unwrap_or(0);
                }
            } else if j.key_is("reasoning") {
                if !j.field() {
                    break;
                }
                match j.string(16, "must be \"detach\" or \"hold\"").as_str() {
                    "hold" => hold = true,
                    "" | "detach" => {}
                    _ => {
                        j.fail("must be \"detach\" or \"hold\"");
                    }
                }
            } else {
                j.unknown();
            }
        }
    }
    j.finish()?;
    if phrases.list.is_empty() {
        for p in DEFAULT_PHRASES {
            phrases.add(p.as_bytes()).map_err(|e| e.to_string())?;
        }
    }
    Ok(Detector { m: Rc::new(Matcher::compile(phrases.list)), policy, hold, free: Vec::new() })
}

retryhost::transform!(Detector, new);
