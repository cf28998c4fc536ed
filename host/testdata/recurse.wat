;; recurse.wat (hostile): every decide and every part recurses without end.
;; Expected: the call stack reaches wazero's ceiling and the call traps
;; (ErrTrap and ErrStackOverflow, not a timeout); the instance is discarded.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func $down (param i32) (result i32)
    (i32.add (call $down (i32.add (local.get 0) (i32.const 1))) (i32.const 1)))
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  (func (export "retryhost_part") (param i64 i32) (result i64)
    (i64.extend_i32_s (call $down (i32.const 0))))
  (func (export "retryhost_decide") (param i32) (result i32)
    (call $down (i32.const 0))))
