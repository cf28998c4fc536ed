;; tablehuge.wat (hostile): four declared tables of 2^27-1 entries, never
;; touched (the Go heap accounts 8 GiB for them).
;; Expected: refused at load (ErrLimit, LimitError "TableEntries": the first
;; table alone is 128 times the default limit).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (table 0x7ffffff funcref)
  (table 0x7ffffff funcref)
  (table 0x7ffffff funcref)
  (table 0x7ffffff funcref)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_decide") (param i32) (result i32) (i32.const 0)))
