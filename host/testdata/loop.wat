;; loop.wat (hostile): every decide and every part loops forever.
;; Expected: the per-call deadline closes the instance (ErrTimeout); the
;; plugin's fail policy applies to the caller's stream only.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  (func (export "retryhost_part") (param i64 i32) (result i64)
    (loop $forever (br $forever)) (i64.const 0))
  (func (export "retryhost_decide") (param i32) (result i32)
    (loop $forever (br $forever)) (i32.const 0)))
