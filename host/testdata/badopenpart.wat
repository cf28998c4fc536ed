;; badopenpart.wat: a transform exporting retryhost_open_part with the wrong
;; signature (an i32 result): refused at load (ErrBadExport).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 4096)))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_part") (param i64 i32) (result i64) (i64.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  (func (export "retryhost_open_part") (param i64 i32 i32) (result i32) (i32.const 0)))
