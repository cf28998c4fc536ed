// The dispatch: it turns the ABI's calls (a length, a handle, the scratch
// buffer) into calls on the plugin's classes and writes their answers back
// as records. The exports in exports/ call it.

import {
  FAIL_VERDICT, FailPolicy, KIND_COUNT, Level, OPEN_NO_ROOM, PartAction, PartKind, Status, rd32, rd64, wr32, wr64,
  wr8,
} from "./abi";
import { JSONReader } from "./json";
import { Attempt, Decision, Part, Policy, StreamInfo, Verdict } from "./records";

// ---- the host's imports (ABI.md §4) ----

// @ts-ignore: decorator
@external("retryhost_v1", "buffer")
declare function hostBuffer(ptr: usize, cap: i32): i32;
// @ts-ignore: decorator
@external("retryhost_v1", "input")
declare function hostInput(ptr: usize, cap: i32): i32;
// @ts-ignore: decorator
@external("retryhost_v1", "policy")
declare function hostPolicy(ptr: usize, len: i32): i32;
// @ts-ignore: decorator
@external("retryhost_v1", "log")
declare function hostLog(level: i32, ptr: usize, len: i32): void;

/** The scratch buffer the SDK registers: 64 KiB, static (ABI.md §4.1). */
export const BUFFER_SIZE: u32 = 65536;
export const BUF: usize = memory.data(<i32>BUFFER_SIZE, 16);

/**
 * log writes one line to the host's logger (cut at 1024 bytes; a budget of
 * lines per plugin: log events, not parts).
 */
export function log(level: Level, msg: string): void {
  const n = String.UTF8.byteLength(msg);
  if (n == 0) return;
  const b = new Uint8Array(min(n, 1024));
  String.UTF8.encodeUnsafe(changetype<usize>(msg), min(msg.length, 1024), b.dataStart);
  hostLog(<i32>level, b.dataStart, b.length);
}

export function logDebug(msg: string): void { log(Level.Debug, msg); }
export function logInfo(msg: string): void { log(Level.Info, msg); }
export function logWarn(msg: string): void { log(Level.Warn, msg); }
export function logError(msg: string): void { log(Level.Error, msg); }

// ---- what a plugin implements ----

/**
 * Config is the operator's config: raw bytes, whose format is the
 * plugin's. A factory that rejects it returns config.reject(reason): the
 * load fails with that reason.
 */
export class Config {
  /** The reason given to reject, or null. */
  reason: string | null = null;
  constructor(public bytes: Uint8Array) {}

  /** text is the config as a string (UTF-8 decoded). */
  text(): string { return String.UTF8.decode(this.bytes.buffer); }

  /** json is a strict JSON reader over the config (see JSONReader). */
  json(): JSONReader { return new JSONReader(this.bytes.dataStart, this.bytes.length); }

  /** reject rejects the config with a reason; a factory returns its result. */
  reject<T>(reason: string): T | null {
    this.reason = reason.length > 0 ? reason : "config rejected";
    return null;
  }
}

/**
 * Decider is a condition's logic. decide returns Decision.none() for "no
 * opinion"; Decision.fail(reason) is a failure of the plugin (its fail
 * policy applies), not a decision. Keep no state between calls: the host
 * runs several instances and replaces them at will (ABI.md §2).
 */
export abstract class Decider {
  abstract decide(a: Attempt): Decision;
  /** policy is declared at load (only its fail field applies to a condition); null declares none. */
  policy(): Policy | null { return null; }
}

/**
 * Stream is one stream's state. The host pins a stream to one instance and
 * calls it in stream order, one call at a time.
 *
 * part judges the next part (valid only during the call). end resolves
 * what is still held when the upstream ended cleanly (HOLD there means
 * PASS). close is called exactly once per opened stream: by the SDK itself
 * right after the stream answers ERROR or DETACH or fails (auto_close),
 * else when the host closes it; the SDK never calls the stream again after.
 */
export abstract class Stream {
  abstract part(p: Part): Verdict;
  end(): Verdict { return Verdict.PASS; }
  close(): void {}
}

/**
 * Transform opens one Stream per stream. policy() declares the fail policy
 * and hold caps; statics() the static verdicts: for a kind k, statics()[k]
 * is the verdict every part of kind k gets without being read (PASS, HOLD,
 * DROP or DETACH; -1 = call the stream). The host (v1.1), or else the SDK,
 * answers those parts without calling Stream.part.
 */
export abstract class Transform {
  /**
   * open returns the new stream's state; null fails the stream (its fail
   * policy applies); NO_ROOM refuses it for lack of room, which is no failure.
   */
  abstract open(info: StreamInfo): Stream | null;
  policy(): Policy | null { return null; }
  statics(): StaticArray<i8> | null { return null; }
}

class NoRoom extends Stream {
  part(p: Part): Verdict { return Verdict.PASS; }
}

/**
 * NO_ROOM is what Transform.open returns to refuse a stream for lack of
 * room, such as a full fixed table of streams (retryhost_open answers
 * OPEN_NO_ROOM, ABI.md §6.3). The host fails only that stream, with its
 * no-capacity error and the plugin's fail policy, keeps the instance and
 * does not count the refusal against the plugin's breaker. The SDK never
 * calls it: it is a marker, compared by identity.
 */
export const NO_ROOM: Stream = new NoRoom();

/** noStatics is a statics() table with no static verdict, to fill in. */
export function noStatics(): StaticArray<i8> {
  const t = new StaticArray<i8>(KIND_COUNT);
  for (let k = 0; k < KIND_COUNT; k++) t[k] = -1;
  return t;
}

let newCondition: ((config: Config) => Decider | null) | null = null;
let newTransform: ((config: Config) => Transform | null) | null = null;

/** registerCondition makes factory the plugin's condition; call it at the top level of your entry file. */
export function registerCondition(factory: (config: Config) => Decider | null): void {
  newCondition = factory;
}

/** registerTransform makes factory the plugin's transform; call it at the top level of your entry file. */
export function registerTransform(factory: (config: Config) => Transform | null): void {
  newTransform = factory;
}

// ---- the instance's state ----

let decider: Decider | null = null;
let transform: Transform | null = null;
// streams is indexed by handle-1 (handles are dense, ABI.md §6.3); far
// holds handles past MAX_DENSE.
const MAX_DENSE: i64 = 1 << 16;
const streams = new Array<Stream | null>();
const far = new Map<i64, Stream>();
let open: i32 = 0;
// static verdicts by kind, 0xff = call
const statics = new StaticArray<u8>(256);
const part = new Part();
const attempt = new Attempt();
const info = new StreamInfo();
let inputCopy = new Uint8Array(0);
const done = new Array<i64>();

// Nothing preempts a guest, so the garbage a plugin leaves is collected
// between exports: every COLLECT_EVERY of them (the minimal runtime never
// collects by itself). A plugin that allocates nothing per call pays
// almost nothing for it.
const COLLECT_EVERY: u32 = 256;
let calls: u32 = 0;

// @ts-ignore: decorator
@inline export function afterCall(): void {
  if (++calls % COLLECT_EVERY == 0) __collect();
}

function reject(msg: string): i32 {
  const n = min(String.UTF8.byteLength(msg), 1024);
  if (n == 0) return -1;
  String.UTF8.encodeUnsafe(changetype<usize>(msg), min(msg.length, 1024), BUF);
  return n;
}

/** init answers retryhost_init. */
export function init(configLen: i32): i32 {
  if (hostBuffer(BUF, <i32>BUFFER_SIZE) != Status.OK) return -1;
  if (configLen < 0) return -1;
  const cfg = new Config(new Uint8Array(configLen));
  if (configLen > 0 && hostInput(cfg.bytes.dataStart, configLen) != configLen) return reject("config: could not be read");
  for (let k = 0; k < 256; k++) statics[k] = 0xff;
  let pol: Policy | null = null;
  const nc = newCondition, nt = newTransform;
  if (nc == null && nt == null) return reject("no condition or transform registered (call registerCondition or registerTransform at the top level)");
  if (nc != null) {
    const d = nc(cfg);
    if (d == null) return reject(cfg.reason != null ? cfg.reason! : "condition factory returned null");
    decider = d;
    pol = d.policy();
  }
  let hints = false;
  let n: i32 = 0;
  if (nt != null) {
    const t = nt(cfg);
    if (t == null) return reject(cfg.reason != null ? cfg.reason! : "transform factory returned null");
    transform = t;
    const tp = t.policy();
    if (tp != null) pol = tp;
    hints = true;
    const st = t.statics();
    if (st != null) {
      for (let k = 0; k < min(st.length, 256); k++) {
        const a = st[k];
        if (a < 0) continue;
        if (a != PartAction.Pass && a != PartAction.Hold && a != PartAction.Drop && a != PartAction.Detach) {
          return reject("static verdicts: only pass, hold, drop and detach can be static (kind " + k.toString() + ")");
        }
        if (k == 0) return reject("static verdicts: kind 0 is invalid");
        statics[k] = <u8>a;
        n = k + 1;
      }
    }
  }
  if (pol == null && !hints) return 0;
  const p = pol != null ? pol : new Policy();
  // The Policy record (ABI.md §8.7), with the v1.1 hints for a transform:
  // auto_close and the static verdicts, then max_streams (v1.2).
  const rec = new Uint8Array(32 + n + 4);
  const r = rec.dataStart;
  wr8(r, <u32>p.fail);
  wr8(r + 1, <u32>p.onCap);
  wr32(r + 4, p.maxHeldParts);
  wr32(r + 8, p.maxHeldBytes);
  wr64(r + 16, <u64>max<i64>(p.maxHoldTime, 0));
  let len: i32 = 24;
  if (hints) {
    wr32(r + 24, 1); // auto_close
    wr32(r + 28, n);
    for (let k = 0; k < n; k++) wr8(r + 32 + k, statics[k]);
    len = 32 + n;
    if (p.maxStreams > 0) {
      wr32(r + len, p.maxStreams);
      len += 4;
    }
  }
  const st = hostPolicy(r, len);
  if (st < 0) return reject("policy refused by the host: status " + st.toString());
  return 0;
}

// input returns where the call's input is: the start of BUF, or a copy read
// with the input import when it did not fit (0 on a failure).
function input(n: i32): usize {
  if (n < 0) return 0;
  if (<u32>n <= BUFFER_SIZE) return BUF;
  if (inputCopy.length < n) inputCopy = new Uint8Array(n);
  if (hostInput(inputCopy.dataStart, n) != n) return 0;
  return inputCopy.dataStart;
}

/** decide answers retryhost_decide. */
export function decide(n: i32): i32 {
  const d = decider;
  if (d == null) return -1;
  const p = input(n);
  if (p == 0 || !attempt.decodeFrom(p, <u32>n)) return -1;
  const r = d.decide(attempt);
  if (r.failure != null) {
    log(Level.Warn, r.failure!);
    return -1;
  }
  if (r.action == 0) return 0;
  if (r.size() > BUFFER_SIZE) return -1;
  return <i32>r.encodeTo(BUF);
}

function stream(h: i64): Stream | null {
  if (<u64>(h - 1) < <u64>streams.length) return unchecked(streams[<i32>(h - 1)]);
  if (h > MAX_DENSE && far.has(h)) return far.get(h);
  return null;
}

function put(h: i64, s: Stream | null): void {
  if (h > MAX_DENSE) {
    if (s == null) far.delete(h);
    else far.set(h, s);
    return;
  }
  while (<i64>streams.length < h) streams.push(null);
  streams[<i32>(h - 1)] = s;
}

function forget(h: i64, s: Stream): void {
  put(h, null);
  open--;
  s.close();
}

/** openStream answers retryhost_open. */
export function openStream(h: i64, n: i32): i32 {
  const t = transform;
  if (t == null || h < 1 || stream(h) != null) return -1;
  const p = input(n);
  if (p == 0 || n < 12) return -1;
  const ml = rd32(p + 12);
  if (<u64>ml > <u64>(n - 16)) return -1;
  info.id = rd64(p);
  info.attempt = rd32(p + 8);
  info.model = String.UTF8.decodeUnsafe(p + 16, ml);
  const s = t.open(info);
  if (s == null) return -1;
  if (changetype<usize>(s) == changetype<usize>(NO_ROOM)) return OPEN_NO_ROOM;
  put(h, s);
  open++;
  return 0;
}

/** openPart answers retryhost_open_part (v1.1). */
export function openPart(h: i64, infoLen: i32, partLen: i32): u64 {
  const at = (<u32>infoLen + 7) & ~7;
  if (infoLen < 0 || partLen < 0 || <u64>at + <u64>partLen > <u64>BUFFER_SIZE) return FAIL_VERDICT;
  const r = openStream(h, infoLen);
  if (r == OPEN_NO_ROOM) return <u64><i64>OPEN_NO_ROOM; // sign-extended, as the ABI asks
  if (r < 0) return FAIL_VERDICT;
  return judge(h, stream(h)!, BUF + at, partLen, 0);
}

/** partCall answers retryhost_part. */
export function partCall(h: i64, n: i32): u64 {
  const s = stream(h);
  if (s == null) return FAIL_VERDICT;
  const p = input(n);
  if (p == 0) return FAIL_VERDICT;
  return judge(h, s, p, n, 0);
}

// judge runs stream h's part on the record [rec, rec+n) and returns the
// packed verdict, its payload written at BUF+off. After ERROR, DETACH or a
// failure the stream is forgotten and closed (auto_close).
function judge(h: i64, s: Stream, rec: usize, n: i32, off: u32): u64 {
  if (n < 4) {
    forget(h, s);
    return FAIL_VERDICT;
  }
  const st = <u32>unchecked(statics[load<u8>(rec)]);
  if (st != 0xff) {
    if (st == PartAction.Detach) forget(h, s);
    return st;
  }
  if (!part.read(rec, <u32>n)) {
    forget(h, s);
    return FAIL_VERDICT;
  }
  const v = s.part(part);
  const a = v.action;
  if (v.failure == null && (a == PartAction.Hold || a == PartAction.Pass || a == PartAction.Drop)) return <u64>a;
  const packed = verdict(v, off);
  if (packed == FAIL_VERDICT || a == PartAction.Error || a == PartAction.Detach) forget(h, s);
  return packed;
}

/** end answers retryhost_end. */
export function end(h: i64): u64 {
  const s = stream(h);
  if (s == null) return FAIL_VERDICT;
  const v = s.end();
  const packed = verdict(v, 0);
  if (packed == FAIL_VERDICT || v.action == PartAction.Error || v.action == PartAction.Detach) forget(h, s);
  return packed;
}

/** closeStream answers retryhost_close; a handle not held (auto_close) is ignored. */
export function closeStream(h: i64): void {
  const s = stream(h);
  if (s != null) forget(h, s);
}

/**
 * BATCH_RESERVE is the room a batch keeps for the next result's payload:
 * parts stops before an entry when less is left, and the host sends the
 * rest again (ABI.md §6.3).
 */
export const BATCH_RESERVE: u32 = 4096;

/** parts answers retryhost_parts. */
export function parts(count: i32, inLen: i32): i32 {
  if (count < 0 || inLen < 0 || <u32>inLen > BUFFER_SIZE) return -1;
  done.length = 0;
  let at = (<u32>inLen + 7) & ~7;
  let off: u32 = 0;
  for (let i = 0; i < count; i++) {
    if (at + 8 + BATCH_RESERVE > BUFFER_SIZE) return i; // the host sends entries i… again
    if (off + 12 > <u32>inLen) return -1;
    const h = <i64>rd64(BUF + off);
    const ln = rd32(BUF + off + 8);
    off += 12;
    if (ln > <u32>inLen - off) return -1;
    const rec = BUF + off;
    off += ln;
    if (done.includes(h)) {
      wr64(BUF + at, PartAction.Pass); // decided earlier in this batch: ignored
      at += 8;
      continue;
    }
    const s = stream(h);
    if (s == null) return -1;
    const packed = judge(h, s, rec, <i32>ln, at + 8);
    if (packed == FAIL_VERDICT) return -1;
    const a = <u32>packed;
    if (a == PartAction.Error || a == PartAction.Detach) done.push(h);
    wr64(BUF + at, packed);
    at += 8 + <u32>(packed >> 32);
  }
  return count;
}

// verdict encodes v, writes its payload at BUF+off and returns it packed.
// The payload is built in a separate buffer first: a received part's
// strings may point at the bytes it overwrites.
function verdict(v: Verdict, off: u32): u64 {
  if (v.failure != null) {
    log(Level.Warn, v.failure!);
    return FAIL_VERDICT;
  }
  switch (v.action) {
    case PartAction.Pass: case PartAction.Hold: case PartAction.Drop: case PartAction.Detach:
      return <u64>v.action;
    case PartAction.Error: {
      const e = v.error;
      if (e == null) return <u64>v.action;
      const size = e.size();
      if (size > BUFFER_SIZE - off) return FAIL_VERDICT;
      const tmp = new Uint8Array(size);
      e.encodeTo(tmp.dataStart);
      memory.copy(BUF + off, tmp.dataStart, size);
      return (<u64>size << 32) | <u64>v.action;
    }
    case PartAction.Replace: {
      const ps = v.replace;
      let size: u32 = 4;
      if (ps != null) for (let i = 0; i < ps.length; i++) size += 4 + ps[i].size();
      if (size > BUFFER_SIZE - off) return FAIL_VERDICT;
      const tmp = new Uint8Array(size);
      const t = tmp.dataStart;
      let o: usize = t + 4;
      wr32(t, ps == null ? 0 : ps.length);
      if (ps != null) {
        for (let i = 0; i < ps.length; i++) {
          const k = ps[i].encodeTo(o + 4);
          wr32(o, k);
          o += 4 + k;
        }
      }
      memory.copy(BUF + off, t, size);
      return (<u64>size << 32) | <u64>v.action;
    }
  }
  return FAIL_VERDICT;
}

/** openStreams is the number of open streams (for tests). */
export function openStreams(): i32 { return open; }

// Keep FailPolicy and PartKind reachable for re-export.
export { FailPolicy, PartKind };
