;; huge.wat (hostile): claims outputs far larger than its buffer and floods
;; its log. retryhost_part returns REPLACE with a 2 GiB payload; decide a
;; 2 GiB decision; every call logs a 1 MiB line. Expected: ErrABIViolation,
;; log lines cut at 1024 bytes, host memory unaffected.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (import "retryhost_v1" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 17)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  (func (export "retryhost_part") (param i64 i32) (result i64)
    (call $log (i32.const 8) (i32.const 0) (i32.const 1048576))
    (i64.const 0x7fffffff00000004))
  (func (export "retryhost_decide") (param i32) (result i32)
    (call $log (i32.const 8) (i32.const 0) (i32.const 1048576))
    (i32.const 0x7fffffff)))
