;; holdall.wat (hostile, ABI v1.2): declares the largest hold caps the
;; record can say (2^32-1 parts and bytes, 292 years) and HOLDs every
;; part; PASS at the end. Config byte 0: 1 = fail-closed. Expected: the
;; host clamps the caps to the operator's maxima (a plugin may only
;; tighten them), so the driver never holds more than those.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (import "retryhost_v1" "input" (func $input (param i32 i32) (result i32)))
  (import "retryhost_v1" "policy" (func $policy (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param $len i32) (result i32)
    (drop (call $buffer (i32.const 1024) (i32.const 4096)))
    (if (i32.eq (call $input (i32.const 0) (i32.const 1)) (i32.const 1))
      (then (i32.store8 (i32.const 512) (i32.load8_u (i32.const 0)))))
    (i32.store (i32.const 516) (i32.const -1))
    (i32.store (i32.const 520) (i32.const -1))
    (i64.store (i32.const 528) (i64.const 0x7fffffffffffffff))
    (drop (call $policy (i32.const 512) (i32.const 24)))
    (i32.const 0))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_part") (param i64 i32) (result i64) (i64.const 1))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64)))
