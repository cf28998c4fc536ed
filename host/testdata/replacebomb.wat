;; replacebomb.wat (hostile, ABI v1.2): REPLACE amplification. Config: u32
;; count, u32 kind (little-endian). Every part is answered REPLACE with a
;; list of `count` parts of that kind, each an empty 12-byte record, in a
;; 1 MiB buffer (the host's default cap). count 65535 is over the per-call
;; cap (ErrLimit "replace parts per call"); count 1000 is under it and goes
;; over the per-stream cap at the second part; kind 1 (stream-start) may
;; not be injected at all (ErrABIViolation). It reads its config with the
;; input length idiom of ABI.md §9.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (import "retryhost_v1" "input" (func $input (param i32 i32) (result i32)))
  (memory (export "memory") 18)
  (global $count (mut i32) (i32.const 1))
  (global $kind (mut i32) (i32.const 4))
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param $len i32) (result i32)
    (local $n i32)
    (if (i32.ne (call $buffer (i32.const 65536) (i32.const 1048576)) (i32.const 0))
      (then (return (i32.const -1))))
    (local.set $n (call $input (i32.const 0) (i32.const 8)))
    ;; the length comes back whether or not it was copied: check it
    (if (i32.ne (local.get $n) (i32.const 8)) (then (return (i32.const -1))))
    (global.set $count (i32.load (i32.const 0)))
    (global.set $kind (i32.load (i32.const 4)))
    ;; at most what fits the buffer: 4 + 16 × count ≤ 1 MiB
    (if (i32.gt_u (global.get $count) (i32.const 65535)) (then (return (i32.const -1))))
    (i32.const 0))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  (func (export "retryhost_part") (param i64 i32) (result i64)
    (local $i i32) (local $p i32)
    (i32.store (i32.const 65536) (global.get $count))
    (local.set $p (i32.const 65540))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (global.get $count)))
        (i32.store (local.get $p) (i32.const 12))
        (i32.store (i32.add (local.get $p) (i32.const 4)) (global.get $kind))
        (i64.store (i32.add (local.get $p) (i32.const 8)) (i64.const 0))
        (local.set $p (i32.add (local.get $p) (i32.const 16)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    ;; REPLACE (4) with payload 4 + 16 × count
    (i64.or
      (i64.shl (i64.extend_i32_u (i32.add (i32.const 4) (i32.shl (global.get $count) (i32.const 4)))) (i64.const 32))
      (i64.const 4))))
