//! A strict JSON reader for configs, with the rules of the Go SDK's
//! sdk.DecodeJSON and the C guests' json.h, so a plugin in any of the SDKs
//! accepts exactly the configs the built-ins accept:
//!   - RFC 8259 JSON, valid UTF-8, one value (an object for a config) or an
//!     empty or all-white-space config (the defaults); nothing after it;
//!   - keys spelt exactly, each at most once per object ([`JsonReader::field`]);
//!     an unknown key is an error ([`JsonReader::unknown`]);
//!   - null is not a value (leave the field out);
//!   - \u escapes decode as encoding/json does (a lone surrogate is U+FFFD).
//!
//! The first failure is kept ("config: ..."), and every later read fails,
//! so a parser can check once, at the end ([`JsonReader::finish`]).

use std::collections::BTreeSet;

/// utf8_next decodes one rune of s (non-empty) as Go's utf8.DecodeRune:
/// (rune, size); an invalid or cut sequence is (U+FFFD, 1).
pub fn utf8_next(s: &[u8]) -> (u32, usize) {
    let c = s[0] as u32;
    if c < 0x80 {
        return (c, 1);
    }
    if !(0xc2..=0xf4).contains(&c) {
        return (0xfffd, 1);
    }
    let (mut lo, mut hi) = (0x80u8, 0xbfu8);
    let n = s.len();
    let cont = |b: u8| (0x80..=0xbf).contains(&b);
    if c < 0xe0 {
        if n < 2 || s[1] < lo || s[1] > hi {
            return (0xfffd, 1);
        }
        return ((c & 0x1f) << 6 | (s[1] as u32 & 0x3f), 2);
    }
    if c < 0xf0 {
        if c == 0xe0 {
            lo = 0xa0;
        } else if c == 0xed {
            hi = 0x9f;
        }
        if n < 3 || s[1] < lo || s[1] > hi || !cont(s[2]) {
            return (0xfffd, 1);
        }
        return ((c & 0x0f) << 12 | (s[1] as u32 & 0x3f) << 6 | (s[2] as u32 & 0x3f), 3);
    }
    if c == 0xf0 {
        lo = 0x90;
    } else if c == 0xf4 {
        hi = 0x8f;
    }
    if n < 4 || s[1] < lo || s[1] > hi || !cont(s[2]) || !cont(s[3]) {
        return (0xfffd, 1);
    }
    ((c & 0x07) << 18 | (s[1] as u32 & 0x3f) << 12 | (s[2] as u32 & 0x3f) << 6 | (s[3] as u32 & 0x3f), 4)
}

/// utf8_put writes rune r as UTF-8 into d and returns its length.
pub fn utf8_put(d: &mut [u8; 4], r: u32) -> usize {
    if r < 0x80 {
        d[0] = r as u8;
        1
    } else if r < 0x800 {
        d[0] = 0xc0 | (r >> 6) as u8;
        d[1] = 0x80 | (r & 0x3f) as u8;
        2
    } else if r < 0x10000 {
        d[0] = 0xe0 | (r >> 12) as u8;
        d[1] = 0x80 | (r >> 6 & 0x3f) as u8;
        d[2] = 0x80 | (r & 0x3f) as u8;
        3
    } else {
        d[0] = 0xf0 | (r >> 18) as u8;
        d[1] = 0x80 | (r >> 12 & 0x3f) as u8;
        d[2] = 0x80 | (r >> 6 & 0x3f) as u8;
        d[3] = 0x80 | (r & 0x3f) as u8;
        4
    }
}

/// JsonReader reads a config as a stream of tokens, at load (it allocates):
///
/// ```ignore
/// let mut j = config.json();
/// if !j.blank() && j.object_begin() {
///     while j.next_key() {
///         if j.key_is("fail") {
///             if j.field() { fail = j.string(16, "must be \"open\" or \"closed\"") }
///         } else {
///             j.unknown();
///         }
///     }
/// }
/// j.finish()?;
/// ```
pub struct JsonReader<'a> {
    s: &'a [u8],
    i: usize,
    error: Option<String>,
    /// The key next_key read last (decoded bytes).
    pub key: Vec<u8>,
    current: Vec<u8>,
    seen: Vec<BTreeSet<Vec<u8>>>,
    counts: Vec<u32>,
}

fn quote(out: &mut String, s: &[u8]) {
    out.push('"');
    for &c in s {
        if c < 0x20 || c == b'"' || c == b'\\' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\x");
            out.push(HEX[(c >> 4) as usize] as char);
            out.push(HEX[(c & 15) as usize] as char);
        } else {
            out.push(c as char);
        }
    }
    out.push('"');
}

const NULL: &str = "null is not a value: leave the field out";

impl<'a> JsonReader<'a> {
    pub fn new(s: &'a [u8]) -> Self {
        let mut j = JsonReader { s, i: 0, error: None, key: Vec::new(), current: Vec::new(), seen: Vec::new(), counts: Vec::new() };
        if std::str::from_utf8(s).is_err() {
            j.fail("not valid UTF-8");
        }
        j
    }

    /// error is the first failure, "config: ...".
    pub fn error(&self) -> Option<&str> { self.error.as_deref() }

    /// fail records the first failure, naming the field being read; it returns false.
    pub fn fail(&mut self, msg: &str) -> bool {
        if self.error.is_none() {
            let mut e = String::from("config: ");
            if !self.current.is_empty() {
                quote(&mut e, &self.current);
                e.push_str(": ");
            }
            e.push_str(msg);
            self.error = Some(e);
        }
        false
    }

    fn syntax(&mut self) -> bool {
        if self.error.is_some() {
            return false;
        }
        self.current.clear();
        let msg = format!("invalid JSON at byte {}", self.i);
        self.fail(&msg)
    }

    fn peek(&mut self) -> i32 {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
        if self.error.is_some() || self.i >= self.s.len() {
            -1
        } else {
            self.s[self.i] as i32
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() != c as i32 {
            return false;
        }
        self.i += 1;
        true
    }

    /// blank reports whether the config is empty or JSON white space only: the defaults.
    pub fn blank(&mut self) -> bool { self.error.is_none() && self.peek() < 0 }

    /// finish checks nothing follows the value read; the first failure otherwise.
    pub fn finish(&mut self) -> Result<(), String> {
        self.current.clear();
        if self.error.is_none() && self.peek() >= 0 {
            self.syntax();
        }
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// object_begin reads '{'.
    pub fn object_begin(&mut self) -> bool {
        if self.error.is_some() {
            return false;
        }
        if self.peek() == b'n' as i32 {
            return self.fail(NULL);
        }
        if !self.eat(b'{') {
            return self.fail("want a JSON object");
        }
        self.seen.push(BTreeSet::new());
        self.counts.push(0);
        true
    }

    /// next_key reads the next key into key and returns true, or false at '}' (or a failure).
    pub fn next_key(&mut self) -> bool {
        if self.error.is_some() {
            return false;
        }
        if self.eat(b'}') {
            self.seen.pop();
            self.counts.pop();
            return false;
        }
        let depth = self.counts.len() - 1;
        if self.counts[depth] > 0 && !self.eat(b',') {
            return self.syntax();
        }
        if self.peek() != b'"' as i32 {
            return self.syntax();
        }
        let save = std::mem::take(&mut self.current);
        let mut key = Vec::new();
        if !self.read_string(&mut key, 256, "a key is longer than 256 bytes") {
            return false;
        }
        self.current = save;
        self.key = key;
        if !self.eat(b':') {
            return self.syntax();
        }
        self.counts[depth] += 1;
        true
    }

    /// key_is reports whether the key read last is name, exactly.
    pub fn key_is(&self, name: &str) -> bool { self.key == name.as_bytes() }

    /// field marks the key read last as seen in this object (a second time
    /// is a failure) and names it in messages.
    pub fn field(&mut self) -> bool {
        if self.error.is_some() {
            return false;
        }
        self.current = self.key.clone();
        let set = self.seen.last_mut().expect("field outside an object");
        if !set.insert(self.key.clone()) {
            return self.fail("duplicate field");
        }
        true
    }

    /// unknown fails with "unknown field" naming the key read last.
    pub fn unknown(&mut self) -> bool {
        self.current.clear();
        let mut m = String::from("unknown field ");
        quote(&mut m, &self.key);
        self.fail(&m)
    }

    /// array_begin reads '['.
    pub fn array_begin(&mut self) -> bool {
        if self.error.is_some() {
            return false;
        }
        if self.peek() == b'n' as i32 {
            return self.fail(NULL);
        }
        if !self.eat(b'[') {
            return self.fail("want a JSON array");
        }
        self.counts.push(0);
        true
    }

    /// next_item returns true before each item, false at ']' (or a failure).
    pub fn next_item(&mut self) -> bool {
        if self.error.is_some() {
            return false;
        }
        if self.eat(b']') {
            self.counts.pop();
            return false;
        }
        let depth = self.counts.len() - 1;
        if self.counts[depth] > 0 && !self.eat(b',') {
            return self.syntax();
        }
        self.counts[depth] += 1;
        true
    }

    /// string reads a string of at most max bytes once decoded (longer
    /// fails with too_long); empty on a failure.
    pub fn string(&mut self, max: usize, too_long: &str) -> String {
        let mut b = Vec::new();
        if !self.read_string(&mut b, max, too_long) {
            return String::new();
        }
        String::from_utf8(b).unwrap_or_default() // the input is valid UTF-8, and so are its escapes
    }

    /// bytes reads a string as its decoded UTF-8 bytes; None on a failure.
    pub fn bytes(&mut self, max: usize, too_long: &str) -> Option<Vec<u8>> {
        let mut b = Vec::new();
        if self.read_string(&mut b, max, too_long) { Some(b) } else { None }
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        if at + 4 > self.s.len() {
            return None;
        }
        let mut v = 0u32;
        for &c in &self.s[at..at + 4] {
            let h = (c as char).to_digit(16)?;
            v = v << 4 | h;
        }
        Some(v)
    }

    fn read_string(&mut self, out: &mut Vec<u8>, max: usize, too_long: &str) -> bool {
        if self.error.is_some() {
            return false;
        }
        if self.peek() == b'n' as i32 {
            return self.fail(NULL);
        }
        if !self.eat(b'"') {
            return self.fail("want a string");
        }
        let n = self.s.len();
        loop {
            if self.i >= n {
                return self.syntax();
            }
            let c = self.s[self.i];
            if c == b'"' {
                self.i += 1;
                break;
            }
            if c < 0x20 {
                return self.syntax();
            }
            let mut tmp = [0u8; 4];
            let k;
            if c != b'\\' {
                tmp[0] = c;
                k = 1;
                self.i += 1;
            } else {
                if self.i + 1 >= n {
                    return self.syntax();
                }
                let e = self.s[self.i + 1];
                self.i += 2;
                k = match e {
                    b'"' | b'\\' | b'/' => { tmp[0] = e; 1 }
                    b'b' => { tmp[0] = 8; 1 }
                    b'f' => { tmp[0] = 12; 1 }
                    b'n' => { tmp[0] = 10; 1 }
                    b'r' => { tmp[0] = 13; 1 }
                    b't' => { tmp[0] = 9; 1 }
                    b'u' => {
                        let mut r = match self.hex4(self.i) {
                            Some(r) => r,
                            None => {
                                self.i -= 2;
                                return self.syntax();
                            }
                        };
                        self.i += 4;
                        if (0xd800..0xe000).contains(&r) {
                            // encoding/json: a pair decodes; anything else is
                            // U+FFFD and the next escape is read on its own
                            let mut r2 = None;
                            if r < 0xdc00 && self.i + 6 <= n && self.s[self.i] == b'\\' && self.s[self.i + 1] == b'u' {
                                r2 = self.hex4(self.i + 2);
                            }
                            match r2 {
                                Some(r2) if (0xdc00..0xe000).contains(&r2) => {
                                    r = 0x10000 + ((r - 0xd800) << 10) + (r2 - 0xdc00);
                                    self.i += 6;
                                }
                                _ => r = 0xfffd,
                            }
                        }
                        utf8_put(&mut tmp, r)
                    }
                    _ => {
                        self.i -= 2;
                        return self.syntax();
                    }
                };
            }
            if out.len() + k > max {
                return self.fail(too_long);
            }
            out.extend_from_slice(&tmp[..k]);
        }
        true
    }

    // number reads a JSON number literal: (start, end, has a fraction or an exponent).
    fn number(&mut self) -> Option<(usize, usize, bool)> {
        if self.error.is_some() {
            return None;
        }
        let c = self.peek();
        if c == b'n' as i32 {
            self.fail(NULL);
            return None;
        }
        if c != b'-' as i32 && !(b'0' as i32..=b'9' as i32).contains(&c) {
            self.fail("want a number");
            return None;
        }
        let s = self.s;
        let n = s.len();
        let b = self.i;
        let mut i = self.i;
        let mut frac = false;
        let digit = |i: usize| i < n && s[i].is_ascii_digit();
        if s[i] == b'-' {
            i += 1;
        }
        if i >= n {
            self.i = i;
            self.syntax();
            return None;
        }
        if s[i] == b'0' {
            i += 1;
        } else if (b'1'..=b'9').contains(&s[i]) {
            while digit(i) {
                i += 1;
            }
        } else {
            self.i = i;
            self.syntax();
            return None;
        }
        if i < n && s[i] == b'.' {
            i += 1;
            frac = true;
            if !digit(i) {
                self.i = i;
                self.syntax();
                return None;
            }
            while digit(i) {
                i += 1;
            }
        }
        if i < n && (s[i] == b'e' || s[i] == b'E') {
            i += 1;
            frac = true;
            if i < n && (s[i] == b'+' || s[i] == b'-') {
                i += 1;
            }
            if !digit(i) {
                self.i = i;
                self.syntax();
                return None;
            }
            while digit(i) {
                i += 1;
            }
        }
        self.i = i;
        Some((b, i, frac))
    }

    /// integer reads an integer in [0, max] (no fraction, no exponent); None on a failure (with msg).
    pub fn integer(&mut self, max: i64, msg: &str) -> Option<i64> {
        let (b, e, frac) = self.number()?;
        if frac {
            self.fail(msg);
            return None;
        }
        let neg = self.s[b] == b'-';
        let mut v: u64 = 0;
        for &c in &self.s[b + neg as usize..e] {
            if v > 100_000_000_000_000_000 {
                self.fail(msg); // far past any bound
                return None;
            }
            v = v * 10 + (c - b'0') as u64;
        }
        if (neg && v != 0) || v > max as u64 {
            self.fail(msg);
            return None;
        }
        Some(v as i64)
    }

    /// boolean reads true or false; None on a failure.
    pub fn boolean(&mut self) -> Option<bool> {
        if self.error.is_some() {
            return None;
        }
        let c = self.peek();
        if c == b'n' as i32 {
            self.fail(NULL);
            return None;
        }
        if self.s[self.i..].starts_with(b"true") {
            self.i += 4;
            return Some(true);
        }
        if self.s[self.i..].starts_with(b"false") {
            self.i += 5;
            return Some(false);
        }
        self.fail("want true or false");
        None
    }

    /// duration reads a string holding a non-negative Go duration ("10s";
    /// "" is 0), in nanoseconds; None on a failure (with msg).
    pub fn duration(&mut self, msg: &str) -> Option<i64> {
        let b = self.bytes(64, msg)?;
        if b.is_empty() {
            return Some(0);
        }
        match parse_duration(&b) {
            Some(d) => Some(d),
            None => {
                self.fail(msg);
                None
            }
        }
    }
}

/// parse_duration parses a Go duration (time.ParseDuration, exactly) in
/// nanoseconds; None if it is malformed, overflows or is negative ("-0s" is 0).
pub fn parse_duration(s: &[u8]) -> Option<i64> {
    const MAX63: u64 = 1 << 63;
    let n = s.len();
    let mut i = 0;
    let mut neg = false;
    let mut d: u64 = 0;
    if n > 0 && (s[0] == b'-' || s[0] == b'+') {
        neg = s[0] == b'-';
        i = 1;
    }
    if n - i == 1 && s[i] == b'0' {
        return Some(0);
    }
    if i == n {
        return None;
    }
    while i < n {
        let (mut v, mut f) = (0u64, 0u64);
        let mut scale = 1f64;
        if !(s[i] == b'.' || s[i].is_ascii_digit()) {
            return None;
        }
        let b = i;
        while i < n && s[i].is_ascii_digit() {
            if v > MAX63 / 10 {
                return None;
            }
            v = v * 10 + (s[i] - b'0') as u64;
            if v > MAX63 {
                return None;
            }
            i += 1;
        }
        let pre = i != b;
        let mut post = false;
        if i < n && s[i] == b'.' {
            i += 1;
            let fb = i;
            let mut over = false;
            while i < n && s[i].is_ascii_digit() {
                if !over {
                    if f > (MAX63 - 1) / 10 {
                        over = true;
                    } else {
                        let y = f * 10 + (s[i] - b'0') as u64;
                        if y > MAX63 {
                            over = true;
                        } else {
                            f = y;
                            scale *= 10.0;
                        }
                    }
                }
                i += 1;
            }
            post = i != fb;
        }
        if !pre && !post {
            return None;
        }
        let ub = i;
        while i < n && s[i] != b'.' && !s[i].is_ascii_digit() {
            i += 1;
        }
        let unit: u64 = match &s[ub..i] {
            b"ns" => 1,
            b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => return None,
        };
        if v > MAX63 / unit {
            return None;
        }
        v *= unit;
        if f > 0 {
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > MAX63 {
                return None;
            }
        }
        d += v;
        if d > MAX63 {
            return None;
        }
    }
    if neg {
        return if d == 0 { Some(0) } else { None }; // a negative duration is refused
    }
    if d > MAX63 - 1 {
        return None;
    }
    Some(d as i64)
}
