// A strict JSON reader for configs, with the rules of the Go SDK's
// sdk.DecodeJSON and the C guests' json.h, so a plugin in any of the SDKs
// accepts exactly the configs the built-ins accept:
//   - RFC 8259 JSON, valid UTF-8, one value (an object for a config) or an
//     empty or all-white-space config (the defaults); nothing after it;
//   - keys spelt exactly, each at most once per object (field()); an
//     unknown key is an error (unknown());
//   - null is not a value (leave the field out);
//   - \u escapes decode as encoding/json does (a lone surrogate is U+FFFD).
// The first failure is kept in error ("config: ..."), and every later read
// fails, so a parser can check once at the end.

/** utf8Next decodes one rune at p (n >= 1 bytes left) as Go's utf8.DecodeRune; size in utf8Size. */
export function utf8Next(p: usize, n: u32): u32 {
  const c = <u32>load<u8>(p);
  utf8Size = 1;
  if (c < 0x80) return c;
  if (c < 0xc2 || c > 0xf4) return 0xfffd;
  let lo: u32 = 0x80, hi: u32 = 0xbf;
  if (c < 0xe0) {
    if (n < 2) return 0xfffd;
    const c1 = <u32>load<u8>(p + 1);
    if (c1 < lo || c1 > hi) return 0xfffd;
    utf8Size = 2;
    return (c & 0x1f) << 6 | (c1 & 0x3f);
  }
  if (c < 0xf0) {
    if (c == 0xe0) lo = 0xa0; else if (c == 0xed) hi = 0x9f;
    if (n < 3) return 0xfffd;
    const c1 = <u32>load<u8>(p + 1), c2 = <u32>load<u8>(p + 2);
    if (c1 < lo || c1 > hi || c2 < 0x80 || c2 > 0xbf) return 0xfffd;
    utf8Size = 3;
    return (c & 0x0f) << 12 | (c1 & 0x3f) << 6 | (c2 & 0x3f);
  }
  if (c == 0xf0) lo = 0x90; else if (c == 0xf4) hi = 0x8f;
  if (n < 4) return 0xfffd;
  const c1 = <u32>load<u8>(p + 1), c2 = <u32>load<u8>(p + 2), c3 = <u32>load<u8>(p + 3);
  if (c1 < lo || c1 > hi || c2 < 0x80 || c2 > 0xbf || c3 < 0x80 || c3 > 0xbf) return 0xfffd;
  utf8Size = 4;
  return (c & 0x07) << 18 | (c1 & 0x3f) << 12 | (c2 & 0x3f) << 6 | (c3 & 0x3f);
}

/** The size of the rune utf8Next read last. */
export let utf8Size: u32 = 1;

/** utf8Put writes rune r as UTF-8 at d and returns its length. */
export function utf8Put(d: usize, r: u32): u32 {
  if (r < 0x80) { store<u8>(d, r); return 1; }
  if (r < 0x800) { store<u8>(d, 0xc0 | r >> 6); store<u8>(d + 1, 0x80 | (r & 0x3f)); return 2; }
  if (r < 0x10000) {
    store<u8>(d, 0xe0 | r >> 12); store<u8>(d + 1, 0x80 | (r >> 6 & 0x3f)); store<u8>(d + 2, 0x80 | (r & 0x3f));
    return 3;
  }
  store<u8>(d, 0xf0 | r >> 18); store<u8>(d + 1, 0x80 | (r >> 12 & 0x3f));
  store<u8>(d + 2, 0x80 | (r >> 6 & 0x3f)); store<u8>(d + 3, 0x80 | (r & 0x3f));
  return 4;
}

/** utf8Valid reports whether [p, p+n) is valid UTF-8 (Go's utf8.Valid). */
export function utf8Valid(p: usize, n: u32): bool {
  for (let i: u32 = 0; i < n; i += utf8Size) {
    const r = utf8Next(p + i, n - i);
    if (r == 0xfffd && utf8Size == 1) return false;
  }
  return true;
}

function isSpace(c: u32): bool { return c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d; }

function hexVal(c: u32): i32 {
  if (c >= 0x30 && c <= 0x39) return <i32>(c - 0x30);
  if (c >= 0x61 && c <= 0x66) return <i32>(c - 0x61 + 10);
  if (c >= 0x41 && c <= 0x46) return <i32>(c - 0x41 + 10);
  return -1;
}

/**
 * JSONReader reads a config as a stream of tokens. Use it in a factory
 * (at load only: it allocates):
 *
 *   const j = config.json();
 *   if (j.blank()) ... defaults
 *   if (j.objectBegin()) while (j.nextKey()) {
 *     if (j.keyIs("fail")) { if (j.field()) fail = j.string(16, "must be ...") }
 *     else j.unknown();
 *   }
 *   if (!j.finish()) return config.reject(j.error!);
 */
export class JSONReader {
  private i: u32 = 0;
  /** The first failure, "config: ..."; null while all is well. */
  error: string | null = null;
  /** The key nextKey read last. */
  key: string = "";
  private keyBytes: Uint8Array = new Uint8Array(0);
  /** The field being read, named in messages (set by field()). */
  private current: string = "";
  private seen: Array<Set<string>> = [];
  private counts: Array<u32> = [];
  /** The bytes the last string() or bytes() read (decoded). */
  last: Uint8Array = new Uint8Array(0);

  constructor(private p: usize, private n: u32) {
    if (!utf8Valid(p, n)) this.fail("not valid UTF-8");
  }

  get failed(): bool { return this.error != null; }

  /** fail records the first failure, naming the field being read; it returns false. */
  fail(msg: string): bool {
    if (this.error != null) return false;
    this.error = this.current.length > 0 ? "config: " + quote(this.current) + ": " + msg : "config: " + msg;
    return false;
  }

  private syntax(): bool {
    if (this.error != null) return false;
    this.current = "";
    return this.fail("invalid JSON at byte " + this.i.toString());
  }

  private ws(): void {
    while (this.i < this.n && isSpace(<u32>load<u8>(this.p + this.i))) this.i++;
  }

  private peek(): i32 {
    this.ws();
    return this.error != null || this.i >= this.n ? -1 : <i32>load<u8>(this.p + this.i);
  }

  private eat(c: i32): bool {
    if (this.peek() != c) return false;
    this.i++;
    return true;
  }

  private at(k: u32): u32 { return <u32>load<u8>(this.p + k); }

  /** blank reports whether the config is empty or JSON white space only: the defaults. */
  blank(): bool { return this.error == null && this.peek() < 0; }

  /** finish checks nothing follows the value read; false (with error set) on any failure. */
  finish(): bool {
    this.current = "";
    if (this.error != null) return false;
    if (this.peek() >= 0) return this.syntax();
    return true;
  }

  /** objectBegin reads '{'. */
  objectBegin(): bool {
    if (this.error != null) return false;
    if (this.peek() == 0x6e) return this.fail("null is not a value: leave the field out");
    if (!this.eat(0x7b)) return this.fail("want a JSON object");
    this.seen.push(new Set<string>());
    this.counts.push(0);
    return true;
  }

  /** nextKey reads the next key into key and returns true, or false at '}' (or a failure). */
  nextKey(): bool {
    if (this.error != null) return false;
    const depth = this.counts.length - 1;
    if (this.eat(0x7d)) {
      this.seen.pop();
      this.counts.pop();
      return false;
    }
    if (this.counts[depth] > 0 && !this.eat(0x2c)) return this.syntax();
    if (this.peek() != 0x22) return this.syntax();
    const save = this.current;
    this.current = "";
    if (!this.readString(256, "a key is longer than 256 bytes")) return false;
    this.current = save;
    this.keyBytes = this.last;
    this.key = String.UTF8.decode(this.last.buffer);
    if (!this.eat(0x3a)) return this.syntax();
    this.counts[depth]++;
    return true;
  }

  /** keyIs reports whether the key read last is name, exactly. */
  keyIs(name: string): bool { return this.key == name; }

  /** field marks the key read last as seen in this object (a second time is a failure) and names it in messages. */
  field(): bool {
    if (this.error != null) return false;
    this.current = this.key;
    const s = this.seen[this.seen.length - 1];
    if (s.has(this.key)) return this.fail("duplicate field");
    s.add(this.key);
    return true;
  }

  /** unknown fails with "unknown field" naming the key read last. */
  unknown(): bool {
    this.current = "";
    return this.fail("unknown field " + quote(this.key));
  }

  /** arrayBegin reads '['. */
  arrayBegin(): bool {
    if (this.error != null) return false;
    if (this.peek() == 0x6e) return this.fail("null is not a value: leave the field out");
    if (!this.eat(0x5b)) return this.fail("want a JSON array");
    this.counts.push(0);
    return true;
  }

  /** nextItem returns true before each item, false at ']' (or a failure). */
  nextItem(): bool {
    if (this.error != null) return false;
    const depth = this.counts.length - 1;
    if (this.eat(0x5d)) {
      this.counts.pop();
      return false;
    }
    if (this.counts[depth] > 0 && !this.eat(0x2c)) return this.syntax();
    this.counts[depth]++;
    return true;
  }

  /** string reads a string of at most max bytes once decoded (longer fails with tooLong); "" on a failure. */
  string(max: u32, tooLong: string): string {
    if (!this.readString(max, tooLong)) return "";
    return String.UTF8.decode(this.last.buffer);
  }

  /** bytes reads a string as its decoded UTF-8 bytes (in last); false on a failure. */
  bytes(max: u32, tooLong: string): bool { return this.readString(max, tooLong); }

  private readString(max: u32, tooLong: string): bool {
    if (this.error != null) return false;
    if (this.peek() == 0x6e) return this.fail("null is not a value: leave the field out");
    if (!this.eat(0x22)) return this.fail("want a string");
    const tmp = memory.data(4);
    // Bound the output by the input left: escapes only shrink.
    const room = min(max, this.n - this.i);
    const out = new Uint8Array(room);
    let o: u32 = 0;
    for (;;) {
      if (this.i >= this.n) return this.syntax();
      const c = this.at(this.i);
      if (c == 0x22) { this.i++; break; }
      if (c < 0x20) return this.syntax();
      let k: u32 = 0;
      if (c != 0x5c) {
        store<u8>(tmp, c);
        k = 1;
        this.i++;
      } else {
        if (this.i + 1 >= this.n) return this.syntax();
        const e = this.at(this.i + 1);
        this.i += 2;
        k = 1;
        switch (e) {
          case 0x22: case 0x5c: case 0x2f: store<u8>(tmp, e); break;
          case 0x62: store<u8>(tmp, 8); break;
          case 0x66: store<u8>(tmp, 12); break;
          case 0x6e: store<u8>(tmp, 10); break;
          case 0x72: store<u8>(tmp, 13); break;
          case 0x74: store<u8>(tmp, 9); break;
          case 0x75: {
            let r = this.hex4(this.i);
            if (r < 0) { this.i -= 2; return this.syntax(); }
            this.i += 4;
            let rune = <u32>r;
            if (rune >= 0xd800 && rune < 0xe000) {
              // encoding/json: a pair decodes; anything else is U+FFFD and
              // the next escape is read on its own
              let r2: i32 = -1;
              if (rune < 0xdc00 && this.i + 6 <= this.n && this.at(this.i) == 0x5c && this.at(this.i + 1) == 0x75) r2 = this.hex4(this.i + 2);
              if (r2 >= 0xdc00 && r2 < 0xe000) {
                rune = 0x10000 + ((rune - 0xd800) << 10) + (<u32>r2 - 0xdc00);
                this.i += 6;
              } else {
                rune = 0xfffd;
              }
            }
            k = utf8Put(tmp, rune);
            break;
          }
          default:
            this.i -= 2;
            return this.syntax();
        }
      }
      if (o + k > max) return this.fail(tooLong);
      for (let j: u32 = 0; j < k; j++) out[o++] = load<u8>(tmp + j);
    }
    this.last = out.subarray(0, o).slice();
    return true;
  }

  private hex4(at: u32): i32 {
    if (at + 4 > this.n) return -1;
    let v = 0;
    for (let k: u32 = 0; k < 4; k++) {
      const h = hexVal(this.at(at + k));
      if (h < 0) return -1;
      v = v << 4 | h;
    }
    return v;
  }

  // number reads a JSON number literal: [numAt, numAt+numLen); numFrac reports a fraction or an exponent.
  private numAt: u32 = 0;
  private numLen: u32 = 0;
  private numFrac: bool = false;

  private number(): bool {
    if (this.error != null) return false;
    const c = this.peek();
    if (c == 0x6e) return this.fail("null is not a value: leave the field out");
    if (c != 0x2d && !(c >= 0x30 && c <= 0x39)) return this.fail("want a number");
    const b = this.i;
    let i = this.i;
    const n = this.n;
    this.numFrac = false;
    if (this.at(i) == 0x2d) i++;
    if (i >= n) { this.i = i; return this.syntax(); }
    if (this.at(i) == 0x30) i++;
    else if (this.at(i) >= 0x31 && this.at(i) <= 0x39) while (i < n && this.at(i) >= 0x30 && this.at(i) <= 0x39) i++;
    else { this.i = i; return this.syntax(); }
    if (i < n && this.at(i) == 0x2e) {
      i++;
      this.numFrac = true;
      if (i >= n || this.at(i) < 0x30 || this.at(i) > 0x39) { this.i = i; return this.syntax(); }
      while (i < n && this.at(i) >= 0x30 && this.at(i) <= 0x39) i++;
    }
    if (i < n && (this.at(i) == 0x65 || this.at(i) == 0x45)) {
      i++;
      this.numFrac = true;
      if (i < n && (this.at(i) == 0x2b || this.at(i) == 0x2d)) i++;
      if (i >= n || this.at(i) < 0x30 || this.at(i) > 0x39) { this.i = i; return this.syntax(); }
      while (i < n && this.at(i) >= 0x30 && this.at(i) <= 0x39) i++;
    }
    this.numAt = b;
    this.numLen = i - b;
    this.i = i;
    return true;
  }

  /** integer reads an integer in [0, max] (no fraction, no exponent); -1 on a failure (with msg). */
  integer(max: i64, msg: string): i64 {
    if (!this.number()) return -1;
    if (this.numFrac) { this.fail(msg); return -1; }
    const neg = this.at(this.numAt) == 0x2d;
    let v: u64 = 0;
    for (let k: u32 = neg ? 1 : 0; k < this.numLen; k++) {
      if (v > 100000000000000000) { this.fail(msg); return -1; } // far past any bound
      v = v * 10 + <u64>(this.at(this.numAt + k) - 0x30);
    }
    if ((neg && v != 0) || v > <u64>max) { this.fail(msg); return -1; }
    return <i64>v;
  }

  /** boolean reads true or false: 1 or 0, -1 on a failure. */
  boolean(): i32 {
    if (this.error != null) return -1;
    const c = this.peek();
    if (c == 0x6e) { this.fail("null is not a value: leave the field out"); return -1; }
    const i = this.i;
    if (c == 0x74 && i + 4 <= this.n && this.at(i + 1) == 0x72 && this.at(i + 2) == 0x75 && this.at(i + 3) == 0x65) {
      this.i += 4;
      return 1;
    }
    if (c == 0x66 && i + 5 <= this.n && this.at(i + 1) == 0x61 && this.at(i + 2) == 0x6c && this.at(i + 3) == 0x73 && this.at(i + 4) == 0x65) {
      this.i += 5;
      return 0;
    }
    this.fail("want true or false");
    return -1;
  }

  /** duration reads a string holding a non-negative Go duration ("10s"; "" is 0), in nanoseconds; -1 on a failure. */
  duration(msg: string): i64 {
    if (!this.readString(64, msg)) return -1;
    const b = this.last;
    if (b.length == 0) return 0;
    const d = parseDuration(b.dataStart, b.length);
    if (d < 0) { this.fail(msg); return -1; }
    return d;
  }
}

function quote(s: string): string {
  let out = "\"";
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c == 0x22 || c == 0x5c) {
      const hex = "0123456789abcdef";
      out += "\\x" + hex.charAt(c >> 4) + hex.charAt(c & 15);
    } else {
      out += String.fromCharCode(c);
    }
  }
  return out + "\"";
}

function unitIs(p: usize, n: u32, lit: string): bool {
  if (<i32>n != lit.length) return false;
  for (let k: u32 = 0; k < n; k++) if (<u32>load<u8>(p + k) != <u32>lit.charCodeAt(k)) return false;
  return true;
}

function unitIsBytes(p: usize, n: u32, a: u32, b: u32, c: u32): bool {
  return n == 3 && <u32>load<u8>(p) == a && <u32>load<u8>(p + 1) == b && <u32>load<u8>(p + 2) == c;
}

const MAX63: u64 = 1 << 63;

/**
 * parseDuration parses a Go duration (time.ParseDuration, exactly) in
 * nanoseconds; -1 if it is malformed, overflows or is negative ("-0s" is 0).
 */
export function parseDuration(s: usize, n: u32): i64 {
  let i: u32 = 0;
  let neg = false;
  let d: u64 = 0;
  if (n > 0 && (load<u8>(s) == 0x2d || load<u8>(s) == 0x2b)) { neg = load<u8>(s) == 0x2d; i = 1; }
  if (n - i == 1 && load<u8>(s + i) == 0x30) return 0;
  if (i == n) return -1;
  while (i < n) {
    let v: u64 = 0, f: u64 = 0;
    let scale: f64 = 1;
    let c = <u32>load<u8>(s + i);
    if (!(c == 0x2e || (c >= 0x30 && c <= 0x39))) return -1;
    const b = i;
    for (; i < n; i++) {
      c = <u32>load<u8>(s + i);
      if (c < 0x30 || c > 0x39) break;
      if (v > MAX63 / 10) return -1;
      v = v * 10 + <u64>(c - 0x30);
      if (v > MAX63) return -1;
    }
    const pre = i != b;
    let post = false;
    if (i < n && load<u8>(s + i) == 0x2e) {
      i++;
      const fb = i;
      let over = false;
      for (; i < n; i++) {
        c = <u32>load<u8>(s + i);
        if (c < 0x30 || c > 0x39) break;
        if (over) continue;
        if (f > (MAX63 - 1) / 10) { over = true; continue; }
        const y = f * 10 + <u64>(c - 0x30);
        if (y > MAX63) { over = true; continue; }
        f = y;
        scale *= 10;
      }
      post = i != fb;
    }
    if (!pre && !post) return -1;
    const ub = i;
    while (i < n) {
      c = <u32>load<u8>(s + i);
      if (c == 0x2e || (c >= 0x30 && c <= 0x39)) break;
      i++;
    }
    const u = s + ub, un = i - ub;
    let unit: u64;
    if (unitIs(u, un, "ns")) unit = 1;
    else if (unitIs(u, un, "us") || (un == 3 && unitIsBytes(u, un, 0xc2, 0xb5, 0x73)) || unitIsBytes(u, un, 0xce, 0xbc, 0x73)) unit = 1000;
    else if (unitIs(u, un, "ms")) unit = 1000000;
    else if (unitIs(u, un, "s")) unit = 1000000000;
    else if (unitIs(u, un, "m")) unit = 60000000000;
    else if (unitIs(u, un, "h")) unit = 3600000000000;
    else return -1;
    if (v > MAX63 / unit) return -1;
    v *= unit;
    if (f > 0) {
      v += <u64>(<f64>f * (<f64>unit / scale));
      if (v > MAX63) return -1;
    }
    d += v;
    if (d > MAX63) return -1;
  }
  if (neg) return d == 0 ? 0 : -1; // a negative duration is refused
  if (d > MAX63 - 1) return -1;
  return <i64>d;
}
