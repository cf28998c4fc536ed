// The exports of a transform: re-export them from your entry file
// (export * from "<sdk>/assembly/exports/transform").
import { afterCall, closeStream, end, init, openPart, openStream, partCall, parts } from "../guest";

/** The ABI version marker: present, never called. */
export function retryhost_abi_v1(): void {}

export function retryhost_init(configLen: i32): i32 {
  return init(configLen);
}

export function retryhost_open(stream: i64, infoLen: i32): i32 {
  const r = openStream(stream, infoLen);
  afterCall();
  return r;
}

export function retryhost_open_part(stream: i64, infoLen: i32, partLen: i32): i64 {
  const r = openPart(stream, infoLen, partLen);
  afterCall();
  return <i64>r;
}

export function retryhost_part(stream: i64, partLen: i32): i64 {
  const r = partCall(stream, partLen);
  afterCall();
  return <i64>r;
}

export function retryhost_parts(count: i32, inLen: i32): i32 {
  const r = parts(count, inLen);
  afterCall();
  return r;
}

export function retryhost_end(stream: i64): i64 {
  const r = end(stream);
  afterCall();
  return <i64>r;
}

export function retryhost_close(stream: i64): void {
  closeStream(stream);
  afterCall();
}
