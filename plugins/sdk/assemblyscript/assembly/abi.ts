// The ABI's numbers (abi/ABI.md, v1.3): statuses, enums, record sizes, and
// the little-endian and UTF-8 helpers the SDK reads and writes records with.

/** The import namespace; its major version is in the name. */
export const MODULE = "retryhost_v1";

/** Statuses the host's imports return (ABI.md §5). */
export enum Status {
  OK = 0,
  Fault = -1,
  Phase = -2,
  Invalid = -3,
  TooSmall = -4,
  TooLarge = -5,
}

/** retryhost_open's answer for "no room for another stream" (ABI.md §6.3). */
export const OPEN_NO_ROOM: i32 = -6;

/** Log levels: slog's numbers. */
export enum Level {
  Debug = -4,
  Info = 0,
  Warn = 4,
  Error = 8,
}

/** The class of a failed attempt (ABI.md §8.1). */
export enum ErrorClass {
  None = 0,
  Unknown = 1,
  Timeout = 2,
  Canceled = 3,
  RateLimit = 4,
  Overloaded = 5,
  Server = 6,
  Client = 7,
  Auth = 8,
  ContextLength = 9,
  ContentFilter = 10,
  Refusal = 11,
  Network = 12,
  Transform = 13,
  Plugin = 14,
}

/** Which deadline fired, for ErrorClass.Timeout. */
export enum Deadline {
  None = 0,
  FirstContent = 1,
  Attempt = 2,
  Total = 3,
  Gap = 4,
}

/** The unified finish reason. */
export enum Reason {
  Unknown = 0,
  Stop = 1,
  Length = 2,
  ContentFilter = 3,
  ToolCalls = 4,
  Error = 5,
  Other = 6,
  Refusal = 7,
}

/** A condition's action (ABI.md §8.2). */
export enum Action {
  None = 0,
  Retry = 1,
  Switch = 2,
  GiveUp = 3,
}

/** The kind of a stream part (ABI.md §8.4). */
export enum PartKind {
  Invalid = 0,
  StreamStart = 1,
  ResponseMeta = 2,
  TextStart = 3,
  TextDelta = 4,
  TextEnd = 5,
  ReasoningStart = 6,
  ReasoningDelta = 7,
  ReasoningEnd = 8,
  ToolInputStart = 9,
  ToolInputDelta = 10,
  ToolInputEnd = 11,
  ToolCall = 12,
  ToolResult = 13,
  File = 14,
  Source = 15,
  Finish = 16,
  Raw = 17,
  Error = 18,
}

/** The number of part kinds v1.3 defines, kind 0 included. */
export const KIND_COUNT: i32 = 19;

/** A transform's verdict on a part (ABI.md §6.3). */
export enum PartAction {
  Pass = 0,
  Hold = 1,
  Error = 2,
  Drop = 3,
  Replace = 4,
  Detach = 5,
}

/** A plugin's fail policy (ABI.md §8.7). */
export enum FailPolicy {
  Open = 0,
  Closed = 1,
}

/** What the host does when a hold cap is hit (ABI.md §8.7). */
export enum CapAction {
  Default = 0,
  Fail = 1,
  Flush = 2,
}

/** A packed verdict that is no action: the host applies the fail policy. */
export const FAIL_VERDICT: u64 = 0xff;

/** The bytes of an Attempt record before its strings. */
export const ATTEMPT_HEADER: u32 = 80;
/** The bytes of a Part record before its id. */
export const PART_HEADER: u32 = 4;

// ---- little-endian access (Wasm is little-endian; loads accept any alignment) ----

// @ts-ignore: decorator
@inline export function rd8(p: usize): u32 { return <u32>load<u8>(p); }
// @ts-ignore: decorator
@inline export function rd16(p: usize): u32 { return <u32>load<u16>(p); }
// @ts-ignore: decorator
@inline export function rd32(p: usize): u32 { return load<u32>(p); }
// @ts-ignore: decorator
@inline export function rd64(p: usize): u64 { return load<u64>(p); }
// @ts-ignore: decorator
@inline export function wr8(p: usize, v: u32): void { store<u8>(p, <u8>v); }
// @ts-ignore: decorator
@inline export function wr16(p: usize, v: u32): void { store<u16>(p, <u16>v); }
// @ts-ignore: decorator
@inline export function wr32(p: usize, v: u32): void { store<u32>(p, v); }
// @ts-ignore: decorator
@inline export function wr64(p: usize, v: u64): void { store<u64>(p, v); }

// ---- strings: UTF-8 in records, UTF-16 in AssemblyScript ----

/** decode returns the UTF-8 bytes [p, p+n) as a string (invalid bytes become U+FFFD). */
export function decode(p: usize, n: u32): string {
  if (n == 0) return "";
  return String.UTF8.decodeUnsafe(p, n);
}

/** utf8Len is the byte length of s in UTF-8. */
export function utf8Len(s: string): u32 {
  return <u32>String.UTF8.byteLength(s);
}

/** putStr writes s as a record string (u32 length, UTF-8 bytes) at p and returns the bytes written. */
export function putStr(p: usize, s: string): u32 {
  const n = <u32>String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, p + 4);
  wr32(p, n);
  return 4 + n;
}

/** strSize is what putStr writes for s. */
export function strSize(s: string): u32 {
  return 4 + utf8Len(s);
}
