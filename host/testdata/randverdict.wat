;; randverdict.wat (hostile): answers every part and every end with a
;; random verdict: PASS, HOLD, ERROR (no payload), DROP, REPLACE or DETACH,
;; the REPLACE list one part of a random kind among text-start,
;; text-delta "x", text-end and stream-start (which a REPLACE may not
;; carry: an ABI violation). Config: u64 seed (xorshift64). Whatever it
;; answers, a stream through the driver must fail cleanly or deliver
;; exactly one stream-start (ABI.md §6.4).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (import "retryhost_v1" "input" (func $input (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $x (mut i64) (i64.const 88172645463325252))
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (drop (call $buffer (i32.const 1024) (i32.const 4096)))
    (if (i32.eq (call $input (i32.const 0) (i32.const 8)) (i32.const 8))
      (then (if (i64.ne (i64.load (i32.const 0)) (i64.const 0))
        (then (global.set $x (i64.load (i32.const 0)))))))
    (i32.const 0))
  (func $next (result i64)
    (local $x i64)
    (local.set $x (global.get $x))
    (local.set $x (i64.xor (local.get $x) (i64.shl (local.get $x) (i64.const 13))))
    (local.set $x (i64.xor (local.get $x) (i64.shr_u (local.get $x) (i64.const 7))))
    (local.set $x (i64.xor (local.get $x) (i64.shl (local.get $x) (i64.const 17))))
    (global.set $x (local.get $x))
    (local.get $x))
  (func $verdict (result i64)
    (local $a i64) (local $k i32)
    (local.set $a (i64.rem_u (call $next) (i64.const 6)))
    (if (i64.ne (local.get $a) (i64.const 4)) (then (return (local.get $a))))
    ;; REPLACE: one part of kind 3, 4, 5 or 1
    (local.set $k (i32.wrap_i64 (i64.and (call $next) (i64.const 3))))
    (local.set $k (select (i32.const 1) (i32.add (local.get $k) (i32.const 3)) (i32.eq (local.get $k) (i32.const 3))))
    (i32.store (i32.const 1024) (i32.const 1))
    (i64.store (i32.const 1032) (i64.const 0))
    (i32.store (i32.const 1040) (i32.const 0))
    (i32.store (i32.const 1032) (local.get $k))
    (if (i32.eq (local.get $k) (i32.const 4))
      (then
        (i32.store (i32.const 1028) (i32.const 13))
        (i32.store (i32.const 1040) (i32.const 1))
        (i32.store8 (i32.const 1044) (i32.const 120))
        (return (i64.const 0x0000001500000004))))
    (i32.store (i32.const 1028) (i32.const 12))
    (i64.const 0x0000001400000004))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_part") (param i64 i32) (result i64) (call $verdict))
  (func (export "retryhost_end") (param i64) (result i64) (call $verdict))
  (func (export "retryhost_close") (param i64)))
