;; logtrap.wat (hostile): every decision logs one line through the log
;; import, writes one line to stdout and one to stderr, then traps, so that
;; every call ends with its instance discarded and replaced.
;; Expected: the log budget and the stdout/stderr budgets belong to the
;; plugin, not to the instance: a replacement instance starts with what its
;; predecessors left, so trapping never buys more output.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (import "retryhost_v1" "log" (func $log (param i32 i32 i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "decided\n")
  ;; an iovec at 16: {ptr 0, len 8}; the count written goes to 24
  (data (i32.const 16) "\00\00\00\00\08\00\00\00")
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 4096)))
  (func (export "retryhost_decide") (param i32) (result i32)
    (call $log (i32.const 0) (i32.const 0) (i32.const 7))
    (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24)))
    (drop (call $fd_write (i32.const 2) (i32.const 16) (i32.const 1) (i32.const 24)))
    unreachable))
