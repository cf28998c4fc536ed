;; membomb.wat (hostile): every part grows memory by 16 pages (1 MiB) until growth
;; fails, then traps (what a Go guest does when it runs out of memory).
;; Expected: growth stops at the host's memory limit; the trap discards the
;; instance (ErrTrap).
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
    (loop $grow
      (br_if $grow (i32.ge_s (memory.grow (i32.const 16)) (i32.const 0))))
    (unreachable)))
