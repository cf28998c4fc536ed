;; tablefill.wat (hostile): a 2^26-entry table (512 MiB of host memory per
;; instance) filled at init.
;; Expected: refused at load (ErrLimit, LimitError "TableEntries").
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (table $t 0x4000000 0x4000000 funcref)
  (func $f)
  (elem declare func $f)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (table.fill $t (i32.const 0) (ref.func $f) (i32.const 0x4000000))
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_decide") (param i32) (result i32) (i32.const 0)))
