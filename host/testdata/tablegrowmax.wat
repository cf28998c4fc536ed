;; tablegrowmax.wat (hostile, loads): every part grows a funcref table by
;; 2^24 entries and fills it. The table declares a maximum of 4096 entries,
;; within the host's limit, so every growth past it fails (-1) inside the
;; guest and table.fill stays inside the table.
;; Expected: loads; its streams pass; the host's memory does not grow.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (table $t 0 4096 funcref)
  (func $f)
  (elem declare func $f)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  (func (export "retryhost_part") (param i64 i32) (result i64)
    (drop (table.grow $t (ref.func $f) (i32.const 0x1000000)))
    (drop (table.grow $t (ref.func $f) (i32.const 64)))
    (table.fill $t (i32.const 0) (ref.func $f) (table.size $t))
    (i64.const 0)))
