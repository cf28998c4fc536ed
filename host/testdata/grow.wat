;; grow.wat: a condition whose every decision grows its memory by 16 pages
;; (1 MiB, as a Go guest's heap does) and has no opinion.
;; Expected: the host's cost of growing the memory is not charged to the
;; call's deadline (see guestMemory).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (drop (call $buffer (i32.const 1024) (i32.const 65536)))
    (i32.const 0))
  (func (export "retryhost_decide") (param i32) (result i32)
    (drop (memory.grow (i32.const 16)))
    (i32.const 0)))
