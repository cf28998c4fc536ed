// The records that cross the boundary (ABI.md §8) as AssemblyScript values:
// the Attempt a condition reads and the Decision it answers, the StreamInfo
// and Parts a transform reads, its Verdicts, and the Policy a plugin
// declares.

import {
  ATTEMPT_HEADER, Action, CapAction, Deadline, ErrorClass, FailPolicy, PART_HEADER, PartAction,
  PartKind, Reason, decode, putStr, rd16, rd32, rd64, rd8, strSize, wr32, wr64, wr8,
} from "./abi";

/** Token counts of an attempt or a finish. */
export class Usage {
  input: i64 = 0;
  output: i64 = 0;
  cacheRead: i64 = 0;
  cacheWrite: i64 = 0;
  reasoning: i64 = 0;
}

/** One earlier attempt of the request, oldest first. */
export class Summary {
  class: ErrorClass = ErrorClass.None;
  status: i32 = 0;
  /** Nanoseconds. */
  duration: i64 = 0;
  model: string = "";
}

/**
 * Attempt is what a condition judges (ABI.md §8.1): the attempt that just
 * failed, or a result a rule may reject. Durations are nanoseconds.
 */
export class Attempt {
  /** 1-based attempt number. */
  number: i32 = 0;
  /** HTTP status, 0 = none. */
  status: i32 = 0;
  class: ErrorClass = ErrorClass.None;
  deadline: Deadline = Deadline.None;
  /** The provider said the error is retryable. */
  retryable: bool = false;
  finishReason: Reason = Reason.Unknown;
  /** Since the request started, nanoseconds. */
  elapsed: i64 = 0;
  /** Of this attempt, nanoseconds. */
  duration: i64 = 0;
  /** The server's Retry-After in nanoseconds, -1 = absent. */
  retryAfter: i64 = -1;
  usage: Usage = new Usage();
  /** "provider/model". */
  model: string = "";
  errorName: string = "";
  message: string = "";
  /** The provider's own finish word. */
  finishRaw: string = "";
  earlier: Summary[] = [];

  /** decodeFrom reads an Attempt record; false if it is malformed. Trailing bytes are ignored. */
  decodeFrom(p: usize, n: u32): bool {
    if (n < ATTEMPT_HEADER) return false;
    this.number = <i32>rd32(p);
    this.status = <i32>rd16(p + 4);
    this.class = <ErrorClass>rd8(p + 6);
    this.deadline = <Deadline>rd8(p + 7);
    this.retryable = (rd8(p + 8) & 1) != 0;
    this.finishReason = <Reason>rd8(p + 9);
    const earlier = rd32(p + 12);
    this.elapsed = <i64>rd64(p + 16);
    this.duration = <i64>rd64(p + 24);
    this.retryAfter = <i64>rd64(p + 32);
    const u = this.usage;
    u.input = <i64>rd64(p + 40);
    u.output = <i64>rd64(p + 48);
    u.cacheRead = <i64>rd64(p + 56);
    u.cacheWrite = <i64>rd64(p + 64);
    u.reasoning = <i64>rd64(p + 72);
    const r = new Reader(p, n, ATTEMPT_HEADER);
    this.model = r.str();
    this.errorName = r.str();
    this.message = r.str();
    this.finishRaw = r.str();
    if (!r.ok || <u64>earlier * 20 > <u64>(n - r.off)) return false;
    const list = new Array<Summary>();
    for (let i: u32 = 0; i < earlier; i++) {
      if (!r.need(16)) return false;
      const s = new Summary();
      s.class = <ErrorClass>rd8(p + r.off);
      s.status = <i32>rd16(p + r.off + 2);
      s.duration = <i64>rd64(p + r.off + 8);
      r.off += 16;
      s.model = r.str();
      if (!r.ok) return false;
      list.push(s);
    }
    this.earlier = list;
    return true;
  }
}

/**
 * Decision is a condition's answer (ABI.md §8.2). The zero Decision
 * (Action.None) is "no opinion": the next condition decides.
 */
export class Decision {
  action: Action = Action.None;
  /** Wait the server's Retry-After (when it sent one) instead of delay. */
  useRetryAfter: bool = false;
  /** Attempts on the target model counting earlier ones, 0 = default. */
  maxAttempts: u32 = 0;
  /** Nanoseconds before the next attempt, 0 = default. */
  delay: i64 = 0;
  /** Nanoseconds for the next attempt, 0 = default. */
  timeout: i64 = 0;
  /** Backoff factor per earlier wait, 0 = default. */
  backoff: f64 = 0;
  /** Target of a switch (required there). */
  model: string = "";
  /** Set by Decision.fail: the call fails instead of deciding. */
  failure: string | null = null;

  /** none is "no opinion". */
  static none(): Decision { return new Decision(); }

  /** retry retries on the same model after delay nanoseconds (0: the request's default). */
  static retry(delay: i64 = 0): Decision {
    const d = new Decision();
    d.action = Action.Retry;
    d.delay = delay;
    return d;
  }

  /** switchTo switches to model (a model key the request knows). */
  static switchTo(model: string): Decision {
    const d = new Decision();
    d.action = Action.Switch;
    d.model = model;
    return d;
  }

  /** giveUp stops retrying. */
  static giveUp(): Decision {
    const d = new Decision();
    d.action = Action.GiveUp;
    return d;
  }

  /**
   * fail is a failure of the plugin, not a decision: the plugin's fail
   * policy applies (fail-open: no opinion). The reason is logged at warn.
   */
  static fail(reason: string): Decision {
    const d = new Decision();
    d.failure = reason;
    return d;
  }

  /** size is the encoded record's length. */
  size(): u32 { return 32 + strSize(this.model); }

  /** encodeTo writes the Decision record at p and returns its length. */
  encodeTo(p: usize): u32 {
    wr8(p, <u32>this.action);
    wr8(p + 1, this.useRetryAfter ? 1 : 0);
    wr8(p + 2, 0);
    wr8(p + 3, 0);
    wr32(p + 4, this.maxAttempts);
    wr64(p + 8, <u64>this.delay);
    wr64(p + 16, <u64>this.timeout);
    wr64(p + 24, reinterpret<u64>(this.backoff));
    return 32 + putStr(p + 32, this.model);
  }
}

/** StreamInfo describes a stream being opened (ABI.md §8.3). */
export class StreamInfo {
  /** The driver's stream id (informative). */
  id: u64 = 0;
  /** 1-based attempt number. */
  attempt: u32 = 0;
  model: string = "";
}

/** Warning is one of a stream start's warnings. */
export class Warning {
  type: string = "";
  feature: string = "";
  message: string = "";
}

// The string slots of a part, by kind: which tail strings it has (ABI.md §8.4).
const S_ID = 0;
const S_DELTA = 1;
const S_A = 2; // model_id | name | media_type | url | raw | message
const S_B = 3; // input | url (file) | title
const S_C = 4; // result | media_type (source)
const S_D = 5; // filename
const SLOTS = 6;

/**
 * Part is one part of a model's stream (ABI.md §8.4).
 *
 * A Part handed to Stream.part is the SDK's own, reused for every call and
 * valid only during it: its fields read the record in the scratch buffer
 * when first asked for. kind, flags and the raw views (idPtr/idLength,
 * deltaPtr/deltaLength) cost nothing; a string field decodes UTF-8 into a
 * new string the first time it is read. Copy what you keep.
 *
 * A Part you build (to REPLACE with) is a plain value: new Part(kind) and
 * set its fields; the helpers Part.text and Part.reasoning build deltas.
 */
export class Part {
  kind: PartKind;
  /** Bit 0: a tool result is an error; bit 1: a provider-executed tool. */
  flags: u8 = 0;

  // The record this part reads (0 for a part built in AssemblyScript), and
  // where each string slot starts (its u32 length) in it.
  private rec: usize = 0;
  private off: StaticArray<u32> = new StaticArray<u32>(SLOTS);
  private warnOff: u32 = 0;
  private warnCount: u32 = 0;
  // The decoded or assigned strings, by slot; null = not decoded yet.
  private strs: StaticArray<string | null> = new StaticArray<string | null>(SLOTS);
  private _timestamp: i64 = 0;
  private _reason: Reason = Reason.Unknown;
  private _usage: Usage | null = null;
  private _warnings: Warning[] | null = null;
  /** A file's bytes, when set (REPLACE with a file part). */
  data: Uint8Array | null = null;

  constructor(kind: PartKind = PartKind.Invalid) {
    this.kind = kind;
  }

  /** text is a text delta of block id. */
  static text(id: string, delta: string): Part {
    const p = new Part(PartKind.TextDelta);
    p.id = id;
    p.delta = delta;
    return p;
  }

  /** reasoning is a reasoning delta of block id. */
  static reasoning(id: string, delta: string): Part {
    const p = new Part(PartKind.ReasoningDelta);
    p.id = id;
    p.delta = delta;
    return p;
  }

  /** The id's UTF-8 bytes in the scratch buffer (a received part only; 0 otherwise). */
  get idPtr(): usize { return this.rec == 0 ? 0 : this.rec + this.off[S_ID] + 4; }
  get idLength(): u32 { return this.rec == 0 ? 0 : rd32(this.rec + this.off[S_ID]); }
  /** The delta's UTF-8 bytes in the scratch buffer (a received part only; 0 otherwise). */
  get deltaPtr(): usize { return this.rec == 0 ? 0 : this.rec + this.off[S_DELTA] + 4; }
  get deltaLength(): u32 { return this.rec == 0 ? 0 : rd32(this.rec + this.off[S_DELTA]); }

  /** The block, call, source or response id. */
  get id(): string { return this.slot(S_ID); }
  set id(v: string) { this.strs[S_ID] = v; }
  /** The text of a text, reasoning or tool-input delta. */
  get delta(): string { return this.slot(S_DELTA); }
  set delta(v: string) { this.strs[S_DELTA] = v; }
  /** ResponseMeta: the model id the provider reports. */
  get modelId(): string { return this.kind == PartKind.ResponseMeta ? this.slot(S_A) : ""; }
  set modelId(v: string) { this.strs[S_A] = v; }
  /** ResponseMeta: Unix nanoseconds, 0 = none. */
  get timestamp(): i64 { return this._timestamp; }
  set timestamp(v: i64) { this._timestamp = v; }
  /** Tool parts (input start, call, result): the tool's name. */
  get toolName(): string { return isTool(this.kind) ? this.slot(S_A) : ""; }
  set toolName(v: string) { this.strs[S_A] = v; }
  /** Tool parts: the input JSON. */
  get toolInput(): string { return isTool(this.kind) ? this.slot(S_B) : ""; }
  set toolInput(v: string) { this.strs[S_B] = v; }
  /** Tool result: the result JSON. */
  get toolResult(): string { return isTool(this.kind) ? this.slot(S_C) : ""; }
  set toolResult(v: string) { this.strs[S_C] = v; }
  /** File and source parts: the media type. */
  get mediaType(): string {
    if (this.kind == PartKind.File) return this.slot(S_A);
    return this.kind == PartKind.Source ? this.slot(S_C) : "";
  }
  set mediaType(v: string) { this.strs[this.kind == PartKind.Source ? S_C : S_A] = v; }
  /** File and source parts: the URL. */
  get url(): string {
    if (this.kind == PartKind.File) return this.slot(S_B);
    return this.kind == PartKind.Source ? this.slot(S_A) : "";
  }
  set url(v: string) { this.strs[this.kind == PartKind.Source ? S_A : S_B] = v; }
  /** Source: the title. */
  get title(): string { return this.kind == PartKind.Source ? this.slot(S_B) : ""; }
  set title(v: string) { this.strs[S_B] = v; }
  /** Source: the file name. */
  get filename(): string { return this.kind == PartKind.Source ? this.slot(S_D) : ""; }
  set filename(v: string) { this.strs[S_D] = v; }
  /** File: the bytes (a copy). */
  fileData(): Uint8Array {
    if (this.data != null || this.rec == 0 || this.kind != PartKind.File) {
      const d = this.data;
      return d == null ? new Uint8Array(0) : d;
    }
    const at = this.rec + this.off[S_A];
    const mt = rd32(at);
    const n = rd32(at + 4 + mt);
    const out = new Uint8Array(n);
    memory.copy(out.dataStart, at + 8 + mt, n);
    return out;
  }
  /** Finish: the unified reason. */
  get finishReason(): Reason { return this._reason; }
  set finishReason(v: Reason) { this._reason = v; }
  /** Finish: the provider's own word. */
  get finishRaw(): string { return this.kind == PartKind.Finish ? this.slot(S_A) : ""; }
  set finishRaw(v: string) { this.strs[S_A] = v; }
  /** Finish: the usage. */
  get usage(): Usage {
    let u = this._usage;
    if (u == null) {
      u = new Usage();
      if (this.rec != 0 && this.kind == PartKind.Finish) {
        const at = this.rec + this.off[S_A];
        const q = at + 4 + rd32(at);
        u.input = <i64>rd64(q);
        u.output = <i64>rd64(q + 8);
        u.cacheRead = <i64>rd64(q + 16);
        u.cacheWrite = <i64>rd64(q + 24);
        u.reasoning = <i64>rd64(q + 32);
      }
      this._usage = u;
    }
    return u;
  }
  /** Error part: the provider's message. */
  get errorMessage(): string { return this.kind == PartKind.Error ? this.slot(S_A) : ""; }
  set errorMessage(v: string) { this.strs[S_A] = v; }
  /** Stream start: the provider's warnings. */
  get warnings(): Warning[] {
    let w = this._warnings;
    if (w == null) {
      w = new Array<Warning>();
      if (this.rec != 0) {
        const r = new Reader(this.rec, 0x7fffffff, this.warnOff);
        for (let i: u32 = 0; i < this.warnCount; i++) {
          const x = new Warning();
          x.type = r.str();
          x.feature = r.str();
          x.message = r.str();
          w.push(x);
        }
      }
      this._warnings = w;
    }
    return w;
  }
  set warnings(v: Warning[]) { this._warnings = v; }

  private slot(i: i32): string {
    const s = this.strs[i];
    if (s != null) return s;
    if (this.rec == 0 || !this.has(i)) return "";
    const at = this.rec + this.off[i];
    const v = decode(at + 4, rd32(at));
    this.strs[i] = v;
    return v;
  }

  private has(i: i32): bool {
    if (i <= S_DELTA) return true;
    switch (this.kind) {
      case PartKind.ResponseMeta: case PartKind.Finish: case PartKind.Error: return i == S_A;
      case PartKind.ToolInputStart: case PartKind.ToolCall: case PartKind.ToolResult: return i <= S_C;
      case PartKind.File: return i <= S_B;
      case PartKind.Source: return true;
    }
    return false;
  }

  /**
   * read points this part at the record [p, p+n) and checks it (as the
   * host's decoder does: a known kind, every string within the record);
   * false if it is malformed. Trailing bytes are ignored.
   */
  read(p: usize, n: u32): bool {
    const strs = this.strs;
    for (let i = 0; i < SLOTS; i++) unchecked(strs[i] = null);
    this._usage = null;
    this._warnings = null;
    this.data = null;
    this._timestamp = 0;
    this._reason = Reason.Unknown;
    this.rec = p;
    if (n < PART_HEADER) return false;
    const kind = rd8(p);
    this.kind = <PartKind>kind;
    this.flags = <u8>rd8(p + 1);
    if (kind == 0 || kind > 18) return false;
    const r = partReader;
    r.reset(p, n, PART_HEADER);
    const off = this.off;
    unchecked(off[S_ID] = r.skip());
    unchecked(off[S_DELTA] = r.skip());
    switch (kind) {
      case PartKind.ResponseMeta:
        off[S_A] = r.skip();
        if (!r.need(8)) return false;
        this._timestamp = <i64>rd64(p + r.off);
        break;
      case PartKind.ToolInputStart: case PartKind.ToolCall: case PartKind.ToolResult:
        off[S_A] = r.skip();
        off[S_B] = r.skip();
        off[S_C] = r.skip();
        break;
      case PartKind.File:
        off[S_A] = r.skip();
        r.skip(); // the data
        off[S_B] = r.skip();
        break;
      case PartKind.Source:
        off[S_A] = r.skip();
        off[S_B] = r.skip();
        off[S_C] = r.skip();
        off[S_D] = r.skip();
        break;
      case PartKind.Finish:
        if (!r.need(1)) return false;
        this._reason = <Reason>rd8(p + r.off);
        r.off++;
        off[S_A] = r.skip();
        if (!r.need(40)) return false;
        break;
      case PartKind.StreamStart: {
        if (!r.need(4)) return false;
        const count = rd32(p + r.off);
        r.off += 4;
        if (<u64>count * 12 > <u64>(n - r.off)) return false;
        this.warnOff = r.off;
        this.warnCount = count;
        for (let i: u32 = 0; i < count * 3; i++) r.skip();
        break;
      }
      case PartKind.Error:
        off[S_A] = r.skip();
        break;
    }
    return r.ok;
  }

  /** detach makes a received part a plain value that no longer reads the buffer. */
  detach(): Part {
    const q = new Part(this.kind);
    q.flags = this.flags;
    q.id = this.id;
    q.delta = this.delta;
    const strs = q.strs;
    for (let i = S_A; i < SLOTS; i++) strs[i] = this.has(i) ? this.slot(i) : "";
    q._timestamp = this._timestamp;
    q._reason = this._reason;
    if (this.kind == PartKind.Finish) q._usage = this.usage;
    if (this.kind == PartKind.StreamStart) q._warnings = this.warnings;
    if (this.kind == PartKind.File) q.data = this.fileData();
    return q;
  }

  /** size is the encoded record's length. */
  size(): u32 {
    let n: u32 = PART_HEADER + strSize(this.id) + strSize(this.delta);
    switch (this.kind) {
      case PartKind.ResponseMeta: return n + strSize(this.modelId) + 8;
      case PartKind.ToolInputStart: case PartKind.ToolCall: case PartKind.ToolResult:
        return n + strSize(this.toolName) + strSize(this.toolInput) + strSize(this.toolResult);
      case PartKind.File: return n + strSize(this.mediaType) + 4 + <u32>this.fileData().length + strSize(this.url);
      case PartKind.Source:
        return n + strSize(this.url) + strSize(this.title) + strSize(this.mediaType) + strSize(this.filename);
      case PartKind.Finish: return n + 1 + strSize(this.finishRaw) + 40;
      case PartKind.StreamStart: {
        n += 4;
        const w = this.warnings;
        for (let i = 0; i < w.length; i++) n += strSize(w[i].type) + strSize(w[i].feature) + strSize(w[i].message);
        return n;
      }
      case PartKind.Error: return n + strSize(this.errorMessage);
    }
    return n;
  }

  /** encodeTo writes the Part record at p and returns its length. */
  encodeTo(p: usize): u32 {
    wr8(p, <u32>this.kind);
    wr8(p + 1, this.flags);
    wr8(p + 2, 0);
    wr8(p + 3, 0);
    let o: usize = p + PART_HEADER;
    o += putStr(o, this.id);
    o += putStr(o, this.delta);
    switch (this.kind) {
      case PartKind.ResponseMeta:
        o += putStr(o, this.modelId);
        wr64(o, <u64>this._timestamp);
        o += 8;
        break;
      case PartKind.ToolInputStart: case PartKind.ToolCall: case PartKind.ToolResult:
        o += putStr(o, this.toolName);
        o += putStr(o, this.toolInput);
        o += putStr(o, this.toolResult);
        break;
      case PartKind.File: {
        o += putStr(o, this.mediaType);
        const d = this.fileData();
        wr32(o, d.length);
        memory.copy(o + 4, d.dataStart, d.length);
        o += 4 + d.length;
        o += putStr(o, this.url);
        break;
      }
      case PartKind.Source:
        o += putStr(o, this.url);
        o += putStr(o, this.title);
        o += putStr(o, this.mediaType);
        o += putStr(o, this.filename);
        break;
      case PartKind.Finish: {
        wr8(o, <u32>this._reason);
        o += 1;
        o += putStr(o, this.finishRaw);
        const u = this.usage;
        wr64(o, <u64>u.input);
        wr64(o + 8, <u64>u.output);
        wr64(o + 16, <u64>u.cacheRead);
        wr64(o + 24, <u64>u.cacheWrite);
        wr64(o + 32, <u64>u.reasoning);
        o += 40;
        break;
      }
      case PartKind.StreamStart: {
        const w = this.warnings;
        wr32(o, w.length);
        o += 4;
        for (let i = 0; i < w.length; i++) {
          o += putStr(o, w[i].type);
          o += putStr(o, w[i].feature);
          o += putStr(o, w[i].message);
        }
        break;
      }
      case PartKind.Error:
        o += putStr(o, this.errorMessage);
        break;
    }
    return <u32>(o - p);
  }
}

function putBytes(p: usize, b: Uint8Array): u32 {
  wr32(p, b.length);
  memory.copy(p + 4, b.dataStart, b.length);
  return 4 + b.length;
}

// partReader is reused by Part.read: a part costs no allocation.
const partReader = new Reader(0, 0, 0);

function isTool(k: PartKind): bool {
  return k == PartKind.ToolInputStart || k == PartKind.ToolCall || k == PartKind.ToolResult;
}

/**
 * PartError is what an ERROR verdict fails the attempt with (ABI.md §8.5):
 * a transform error (class ContentFilter or Transform, a code of the
 * plugin's, a message) or a refusal (the phrase that matched and the text
 * held when it did).
 */
export class PartError {
  refusal: bool = false;
  class: ErrorClass = ErrorClass.Transform;
  code: u32 = 0;
  message: string = "";
  phrase: string = "";
  text: string = "";
  /** The phrase and text as raw bytes, used instead of the strings when set (text may be any bytes the model sent). */
  phraseBytes: Uint8Array | null = null;
  textBytes: Uint8Array | null = null;

  /** transform is a transform error; class is ContentFilter or Transform (anything else reads as Transform). */
  static transform(message: string, code: u32 = 0, cls: ErrorClass = ErrorClass.Transform): PartError {
    const e = new PartError();
    e.message = message;
    e.code = code;
    e.class = cls;
    return e;
  }

  /** refusal is a refusal: the normalised phrase that matched and the text held when it did. */
  static refusal(phrase: string, text: string): PartError {
    const e = new PartError();
    e.refusal = true;
    e.class = ErrorClass.Refusal;
    e.phrase = phrase;
    e.text = text;
    return e;
  }

  size(): u32 {
    const pb = this.phraseBytes, tb = this.textBytes;
    return 8 + strSize(this.message) + (pb != null ? 4 + <u32>pb.length : strSize(this.phrase)) +
      (tb != null ? 4 + <u32>tb.length : strSize(this.text));
  }

  encodeTo(p: usize): u32 {
    wr8(p, this.refusal ? 1 : 0);
    wr8(p + 1, <u32>this.class);
    wr8(p + 2, 0);
    wr8(p + 3, 0);
    wr32(p + 4, this.code);
    let o: usize = p + 8;
    o += putStr(o, this.message);
    const pb = this.phraseBytes, tb = this.textBytes;
    o += pb != null ? putBytes(o, pb) : putStr(o, this.phrase);
    o += tb != null ? putBytes(o, tb) : putStr(o, this.text);
    return <u32>(o - p);
  }
}

/**
 * Verdict is a transform's answer to a part or to the end of a stream.
 * PASS, HOLD, DROP and DETACH are shared constants (no allocation);
 * ERROR and REPLACE carry a payload; Verdict.fail is a failure of the
 * plugin (its fail policy applies), not a verdict.
 */
export class Verdict {
  constructor(
    public action: PartAction,
    public error: PartError | null = null,
    public replace: Part[] | null = null,
    public failure: string | null = null,
  ) {}

  static readonly PASS: Verdict = new Verdict(PartAction.Pass);
  static readonly HOLD: Verdict = new Verdict(PartAction.Hold);
  static readonly DROP: Verdict = new Verdict(PartAction.Drop);
  static readonly DETACH: Verdict = new Verdict(PartAction.Detach);

  /** pass releases the hold queue, then the part. */
  static pass(): Verdict { return Verdict.PASS; }
  /** hold appends the part to the hold queue. */
  static hold(): Verdict { return Verdict.HOLD; }
  /** drop discards the part and keeps the queue. */
  static drop(): Verdict { return Verdict.DROP; }
  /** detach releases queue and part; later parts pass without calls. */
  static detach(): Verdict { return Verdict.DETACH; }
  /** error discards the queue and fails the attempt with e. */
  static error(e: PartError): Verdict { return new Verdict(PartAction.Error, e); }
  /** replace discards queue and part (not the framing) and emits parts (content kinds only). */
  static replaceWith(parts: Part[]): Verdict { return new Verdict(PartAction.Replace, null, parts); }
  /** fail is a failure of the plugin: the fail policy applies. The reason is logged at warn. */
  static fail(reason: string): Verdict { return new Verdict(PartAction.Pass, null, null, reason); }
}

/**
 * Policy is what a plugin declares at load (ABI.md §8.7): its fail policy,
 * its hold caps (0 = the host's default; they may only tighten it), what
 * to do at a cap, and, for a transform, how many streams one instance can
 * hold (0 = not declared).
 */
export class Policy {
  fail: FailPolicy = FailPolicy.Open;
  onCap: CapAction = CapAction.Default;
  maxHeldParts: u32 = 0;
  maxHeldBytes: u32 = 0;
  /** Nanoseconds. */
  maxHoldTime: i64 = 0;
  maxStreams: u32 = 0;
}

/** Reader walks a record's length-prefixed strings, remembering a failure. */
export class Reader {
  ok: bool = true;
  constructor(public p: usize, public n: u32, public off: u32) {}

  reset(p: usize, n: u32, off: u32): void {
    this.p = p;
    this.n = n;
    this.off = off;
    this.ok = true;
  }

  need(k: u32): bool {
    if (!this.ok || this.n - this.off < k) this.ok = false;
    return this.ok;
  }

  /** skip steps over one string and returns where it started. */
  skip(): u32 {
    const at = this.off;
    if (!this.need(4)) return at;
    const k = rd32(this.p + this.off);
    this.off += 4;
    if (k > this.n - this.off) {
      this.ok = false;
      return at;
    }
    this.off += k;
    return at;
  }

  str(): string {
    const at = this.skip();
    if (!this.ok) return "";
    return decode(this.p + at + 4, rd32(this.p + at));
  }
}
