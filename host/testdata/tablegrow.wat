;; tablegrow.wat (hostile): every part grows a funcref table that declares no
;; maximum by 2^24 entries (128 MiB of host memory per call, outside the
;; linear-memory cap).
;; Expected: refused at load (ErrLimit, LimitError "TableEntries"): code that
;; grows a table must declare the table's maximum, within the host's limit.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (table $t 1 funcref)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  (func (export "retryhost_part") (param i64 i32) (result i64)
    (drop (table.grow $t (ref.null func) (i32.const 0x1000000)))
    (i64.const 0)))
