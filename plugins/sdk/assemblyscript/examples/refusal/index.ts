// The refusal detector, ported from the C build (plugins/c/refusal.c): it
// fails an attempt whose leading text is a refusal ("I'm sorry, but I
// can't…") and detaches as soon as the text cannot become one. It decides
// byte for byte as refusalcore and the native detector (the vectors and the
// differential tests in plugins/ check it):
//   - stream start, response metadata and text start: HOLD;
//   - a text delta: append it, normalise the text so far; it starts with a
//     phrase: ERROR with a refusal; it is a prefix of one: HOLD; else DETACH;
//   - reasoning (kinds 6-8) and source (15): HOLD with "reasoning": "hold",
//     else DETACH; any other part: DETACH; the end: PASS.
// Every verdict but a text delta's is declared static, so a v1.1 host sends
// only text deltas. The phrases are compiled at load into a byte trie
// stored as a dense transition table: a delta costs one table load per
// normalised byte, whatever the number of phrases.
//
// Config: the JSON of the other builds (plugins/refusal/README.md), with the
// same limits: phrases, fail, on_cap, max_held_parts, max_held_bytes,
// max_hold_time, reasoning.
import {
  CapAction, Config, FailPolicy, PartAction, Part, PartError, PartKind, Policy, Stream, StreamInfo, Transform,
  Verdict, noStatics, registerTransform,
} from "../../assembly";
import { utf8Next, utf8Put, utf8Size } from "../../assembly/json";
import { DEFAULT_PHRASES, LOWER_ALT, LOWER_RANGES } from "./tables";
export * from "../../assembly/exports/transform";

const MAX_CAP: i64 = 2147483647;
const CFG_CAP: i32 = 65536;

// ---- phrases ----

const MAX_PHRASES: u32 = 128;
const PHRASE_BYTES: u32 = 8192;
const MAX_PHRASE: u32 = 200;
const phr: usize = memory.data(<i32>PHRASE_BYTES);
const phrOff = new StaticArray<u32>(<i32>MAX_PHRASES);
const phrLen = new StaticArray<u32>(<i32>MAX_PHRASES);
let nphr: u32 = 0, phrUsed: u32 = 0, maxLen: u32 = 0;

// ---- normalisation (refusalcore.AppendNormalized) ----

// full reports whether [s, s+n) begins with a complete (or invalid) UTF-8
// sequence, as Go's utf8.FullRune: only a valid but cut sequence is not.
function full(s: usize, n: u32): bool {
  const c = <u32>load<u8>(s);
  let size: u32;
  let lo: u32 = 0x80, hi: u32 = 0xbf;
  if (c < 0xc2 || c > 0xf4) return true;
  if (c < 0xe0) size = 2;
  else if (c < 0xf0) { size = 3; if (c == 0xe0) lo = 0xa0; else if (c == 0xed) hi = 0x9f; }
  else { size = 4; if (c == 0xf0) lo = 0x90; else if (c == 0xf4) hi = 0x8f; }
  if (n >= size) return true;
  if (n > 1) { const c1 = <u32>load<u8>(s + 1); if (c1 < lo || c1 > hi) return true; }
  if (n > 2) { const c2 = <u32>load<u8>(s + 2); if (c2 < 0x80 || c2 > 0xbf) return true; }
  return false;
}

function uspace(r: u32): bool {
  return r == 0x85 || r == 0xa0 || r == 0x1680 || (r >= 0x2000 && r <= 0x200a) || r == 0x2028 ||
    r == 0x2029 || r == 0x202f || r == 0x205f || r == 0x3000;
}

// ulower is Go's unicode.ToLower over the generated table.
function ulower(r: u32): u32 {
  let lo: i32 = 0, hi: i32 = LOWER_RANGES.length / 3;
  while (lo < hi) {
    const m = (lo + hi) >> 1;
    const rlo = <u32>unchecked(LOWER_RANGES[m * 3]), rhi = <u32>unchecked(LOWER_RANGES[m * 3 + 1]);
    if (r > rhi) lo = m + 1;
    else if (r < rlo) hi = m;
    else {
      const d = unchecked(LOWER_RANGES[m * 3 + 2]);
      if (d == LOWER_ALT) return rlo + (((r - rlo) & ~1) | 1);
      return <u32>(<i32>r + d);
    }
  }
  return r;
}

function isAsciiSpace(c: u32): bool {
  return c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d || c == 0x0b || c == 0x0c;
}

function apostrophe(r: u32): bool {
  return r == 0x2018 || r == 0x2019 || r == 0x2bc || r == 0x2032 || r == 0xff07;
}

// normalize writes the normalised form of [s, s+n) at d, stopping once it
// has limit bytes or at a rune split at the end; d holds limit + 4 bytes.
function normalize(s: usize, n: u32, d: usize, limit: u32): u32 {
  let o: u32 = 0, i: u32 = 0;
  let space = false;
  while (i < n && o < limit) {
    let r = <u32>load<u8>(s + i);
    if (r < 0x80) {
      i++;
      if (isAsciiSpace(r)) { space = true; continue; }
      if (r >= 0x41 && r <= 0x5a) r += 0x20;
    } else {
      if (!full(s + i, n - i)) break; // a rune split across deltas: wait
      r = utf8Next(s + i, n - i);
      i += utf8Size;
      if (uspace(r)) { space = true; continue; }
      r = apostrophe(r) ? 0x27 : ulower(r);
    }
    if (space && o > 0) store<u8>(d + o++, 0x20);
    space = false;
    o += utf8Put(d + o, r);
  }
  return o;
}

// ---- the phrases' trie (refusalcore's dfa.go; see refusal.c) ----
//
// next[node * ncls + class(byte)] is the next node (>= 0), or a final
// decision (< 0): -1 diverge, -2-k a match of phrase k that no phrase
// earlier in the list can still override. mat[node] is the first phrase in
// list order the node's path starts with, or -1.

const MAX_NODES: i32 = <i32>PHRASE_BYTES + 1;
const CLASS_RUNE: u32 = 254; // raw: a byte >= 0x80, decoded as a rune first
const CLASS_SPACE: u32 = 255; // raw: ASCII white space
const NONE: i32 = 0x7fff;
const cls: usize = memory.data(256);
const raw: usize = memory.data(256);
let spc: u32 = 0, ncls: u32 = 0, nnodes: u32 = 0;
let next: usize = 0; // i16 entries
const mat = new StaticArray<i16>(MAX_NODES);
const below = new StaticArray<i16>(MAX_NODES);

// @ts-ignore: decorator
@inline function nx(i: u32): i32 { return <i32>load<i16>(next + (<usize>i << 1)); }
// @ts-ignore: decorator
@inline function setNx(i: u32, v: i32): void { store<i16>(next + (<usize>i << 1), <i16>v); }

function compile(): void {
  ncls = 1;
  for (let i: u32 = 0; i < phrUsed; i++) {
    const b = <u32>load<u8>(phr + i);
    if (load<u8>(cls + b) == 0) store<u8>(cls + b, ncls++);
  }
  spc = load<u8>(cls + 0x20);
  for (let c: u32 = 0; c < 256; c++) {
    let v: u32;
    if (c >= 0x80) v = CLASS_RUNE;
    else if (isAsciiSpace(c)) v = CLASS_SPACE;
    else if (c >= 0x41 && c <= 0x5a) v = load<u8>(cls + c + 0x20);
    else v = load<u8>(cls + c);
    store<u8>(raw + c, v);
  }
  // room for the most nodes the phrases can make, zeroed
  const bytes = (phrUsed + 1) * ncls * 2;
  next = heap.alloc(bytes);
  memory.fill(next, 0, bytes);
  nnodes = 1;
  mat[0] = <i16>NONE;
  for (let k: u32 = 0; k < nphr; k++) {
    let n: u32 = 0;
    const p = phr + phrOff[k];
    for (let i: u32 = 0; i < phrLen[k]; i++) {
      const at = n * ncls + <u32>load<u8>(cls + <u32>load<u8>(p + i));
      if (nx(at) == 0) { mat[nnodes] = <i16>NONE; setNx(at, nnodes++); }
      n = <u32>nx(at);
    }
    if (<i32>k < <i32>mat[n]) mat[n] = <i16>k;
  }
  // children have higher ids than their parents: below[] (the first phrase
  // ending strictly under a node) flows up in reverse id order, then mat[]
  // (first phrase on the path) down in id order
  for (let n = <i32>nnodes - 1; n >= 0; n--) {
    let b: i32 = NONE;
    for (let c: u32 = 0; c < ncls; c++) {
      const ch = nx(<u32>n * ncls + c);
      if (ch == 0) continue;
      if (<i32>mat[ch] < b) b = mat[ch];
      if (<i32>below[ch] < b) b = below[ch];
    }
    below[n] = <i16>b;
  }
  for (let n: u32 = 0; n < nnodes; n++) {
    for (let c: u32 = 0; c < ncls; c++) {
      const ch = nx(n * ncls + c);
      if (ch != 0 && mat[n] < mat[ch]) mat[ch] = mat[n];
    }
  }
  // fold the decisions into the table
  for (let n: u32 = 0; n < nnodes; n++) {
    const fall: i32 = <i32>mat[n] == NONE ? -1 : -2 - <i32>mat[n];
    for (let c: u32 = 0; c < ncls; c++) {
      const at = n * ncls + c;
      const t = nx(at);
      if (t == 0) setNx(at, fall);
      else if (<i32>mat[t] != NONE && below[t] > mat[t]) setNx(at, -2 - <i32>mat[t]);
    }
    if (<i32>mat[n] == NONE) mat[n] = -1;
  }
}

// ---- config ----

const TEXT_CAP: u32 = 1000;
const tmp: usize = memory.data(<i32>MAX_PHRASE + 8);

// addPhrase normalises and keeps one phrase; the reason if a limit is hit.
function addPhrase(s: usize, n: u32): string | null {
  if (nphr == MAX_PHRASES) return "more than 128 phrases";
  const len = normalize(s, n, tmp, MAX_PHRASE + 1);
  if (len == 0) return "a phrase is empty once normalised";
  if (len > MAX_PHRASE) return "a phrase is longer than 200 bytes once normalised";
  if (phrUsed + len > PHRASE_BYTES) return "the phrases are longer than 8192 bytes in all once normalised";
  memory.copy(phr + phrUsed, tmp, len);
  phrOff[nphr] = phrUsed;
  phrLen[nphr] = len;
  phrUsed += len;
  if (len > maxLen) maxLen = len;
  nphr++;
  return null;
}

let hold = false; // "reasoning": "hold"

// aside reports whether the reasoning option holds kind k: reasoning (6-8)
// and source (15) parts are no words of the answer.
function aside(k: u32): bool { return hold && ((k >= 6 && k <= 8) || k == 15); }

// ---- per-stream state ----

class Refusal extends Stream {
  len: u32 = 0; // bytes of text
  space: bool = false; // a run of white space is pending in the normalisation
  at: u32 = 0; // the next byte of text to normalise
  node: i32 = 0; // the trie node of the normalised text, or a decision < 0
  text: Uint8Array = new Uint8Array(<i32>TEXT_CAP);
  nextFree: Refusal | null = null;

  reset(): Refusal {
    this.len = 0;
    this.space = false;
    this.at = 0;
    this.node = 0;
    return this;
  }

  part(p: Part): Verdict {
    const k = <u32>p.kind;
    if (k == PartKind.StreamStart || k == PartKind.ResponseMeta || k == PartKind.TextStart) return Verdict.HOLD;
    if (k != PartKind.TextDelta) return aside(k) ? Verdict.HOLD : Verdict.DETACH;
    const dn = p.deltaLength;
    // Only the bytes up to TEXT_CAP are judged: undecided there is a failure.
    const take = dn < TEXT_CAP - this.len ? dn : TEXT_CAP - this.len;
    memory.copy(this.text.dataStart + this.len, p.deltaPtr, take);
    this.len += take;
    this.walk();
    const node = this.node;
    const m = node >= 0 ? <i32>unchecked(mat[node]) : -2 - node;
    if (m < 0 && node >= 0 && take < dn) return Verdict.fail("refusal: more than 1000 bytes of undecided text");
    if (m < 0) return node >= 0 ? Verdict.HOLD : Verdict.DETACH;
    const e = PartError.refusal("", "");
    const ph = new Uint8Array(phrLen[m]);
    memory.copy(ph.dataStart, phr + phrOff[m], phrLen[m]);
    e.phraseBytes = ph;
    e.textBytes = this.text.subarray(0, this.len);
    return Verdict.error(e);
  }

  close(): void {
    this.nextFree = free;
    free = this;
  }

  // walk normalises the text from where it stopped and steps each
  // normalised byte through the trie, until a final decision or a rune
  // split at the end of the text.
  walk(): void {
    const s = this.text.dataStart;
    let i = this.at;
    const n = this.len;
    let node = this.node;
    let space = this.space;
    while (i < n && node >= 0) {
      const c = <u32>load<u8>(raw + <u32>load<u8>(s + i));
      if (c < CLASS_RUNE) {
        i++;
        if (space && node != 0) {
          node = nx(<u32>node * ncls + spc);
          if (node < 0) break;
        }
        space = false;
        node = nx(<u32>node * ncls + c);
        continue;
      }
      if (c == CLASS_SPACE) { i++; space = true; continue; }
      if (!full(s + i, n - i)) break; // a rune split across deltas: wait
      let r = utf8Next(s + i, n - i);
      i += utf8Size;
      if (uspace(r)) { space = true; continue; }
      r = apostrophe(r) ? 0x27 : ulower(r);
      if (space && node != 0) {
        node = nx(<u32>node * ncls + spc);
        if (node < 0) break;
      }
      space = false;
      const k = utf8Put(tmp, r);
      for (let j: u32 = 0; j < k && node >= 0; j++) node = nx(<u32>node * ncls + <u32>load<u8>(cls + <u32>load<u8>(tmp + j)));
    }
    this.at = i;
    this.node = node;
    this.space = space;
  }
}

// free holds closed streams for reuse: after warm-up an open allocates nothing.
let free: Refusal | null = null;

class Detector extends Transform {
  constructor(private pol: Policy) { super(); }

  open(info: StreamInfo): Stream | null {
    const s = free;
    if (s != null) {
      free = s.nextFree;
      return s.reset();
    }
    return new Refusal();
  }

  policy(): Policy | null { return this.pol; }

  statics(): StaticArray<i8> | null {
    const t = noStatics();
    for (let k = 1; k < 19; k++) {
      if (k == PartKind.TextDelta) continue;
      t[k] = <i8>(k <= 3 || aside(k) ? PartAction.Hold : PartAction.Detach);
    }
    return t;
  }
}

registerTransform((config: Config): Transform | null => {
  if (config.bytes.length > CFG_CAP) return config.reject<Transform>("config: longer than 65536 bytes");
  const pol = new Policy();
  const j = config.json();
  if (!j.blank() && j.objectBegin()) {
    while (j.nextKey()) {
      if (j.keyIs("phrases")) {
        if (!j.field() || !j.arrayBegin()) break;
        while (j.nextItem()) {
          if (!j.bytes(<u32>CFG_CAP, "too long")) break;
          const why = addPhrase(j.last.dataStart, j.last.length);
          if (why != null) j.fail(why);
        }
      } else if (j.keyIs("fail")) {
        if (!j.field()) break;
        const v = j.string(16, "must be \"open\" or \"closed\"");
        if (v == "closed") pol.fail = FailPolicy.Closed;
        else if (v.length != 0 && v != "open") j.fail("must be \"open\" or \"closed\"");
      } else if (j.keyIs("on_cap")) {
        if (!j.field()) break;
        const v = j.string(16, "must be \"flush\" or \"fail\"");
        if (v == "fail") pol.onCap = CapAction.Fail;
        else if (v == "flush") pol.onCap = CapAction.Flush;
        else if (v.length != 0) j.fail("must be \"flush\" or \"fail\"");
      } else if (j.keyIs("max_held_parts")) {
        if (j.field()) pol.maxHeldParts = <u32>j.integer(MAX_CAP, "want an integer 0-2147483647");
      } else if (j.keyIs("max_held_bytes")) {
        if (j.field()) pol.maxHeldBytes = <u32>j.integer(MAX_CAP, "want an integer 0-2147483647");
      } else if (j.keyIs("max_hold_time")) {
        if (j.field()) pol.maxHoldTime = j.duration("want a non-negative Go duration such as \"10s\"");
      } else if (j.keyIs("reasoning")) {
        if (!j.field()) break;
        const v = j.string(16, "must be \"detach\" or \"hold\"");
        if (v == "hold") hold = true;
        else if (v.length != 0 && v != "detach") j.fail("must be \"detach\" or \"hold\"");
      } else {
        j.unknown();
      }
    }
  }
  if (!j.finish()) return config.reject<Transform>(j.error!);
  if (nphr == 0) {
    for (let k = 0; k < DEFAULT_PHRASES.length; k++) {
      const b = String.UTF8.encode(DEFAULT_PHRASES[k]);
      addPhrase(changetype<usize>(b), b.byteLength);
    }
  }
  compile();
  return new Detector(pol);
});
