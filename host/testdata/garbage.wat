;; garbage.wat (hostile): answers actions the ABI does not define.
;; retryhost_part returns action 77; retryhost_decide returns a decision with
;; action 9. Expected: ErrABIViolation; the instance is discarded.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  (func (export "retryhost_part") (param i64 i32) (result i64) (i64.const 77))
  (func (export "retryhost_decide") (param i32) (result i32)
    (memory.fill (i32.const 1024) (i32.const 0) (i32.const 36))
    (i32.store8 (i32.const 1024) (i32.const 9))
    (i32.const 36)))
