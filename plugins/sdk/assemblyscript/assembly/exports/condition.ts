// The exports of a condition: re-export them from your entry file
// (export * from "<sdk>/assembly/exports/condition").
import { afterCall, decide, init } from "../guest";

/** The ABI version marker: present, never called. */
export function retryhost_abi_v1(): void {}

export function retryhost_init(configLen: i32): i32 {
  return init(configLen);
}

export function retryhost_decide(attemptLen: i32): i32 {
  const r = decide(attemptLen);
  afterCall();
  return r;
}
