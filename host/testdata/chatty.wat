;; chatty.wat: a condition that logs one line, "decided", on every call and
;; answers "no opinion": the log budget's test (ABI.md §4.4).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (import "retryhost_v1" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "decided")
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 4096)))
  (func (export "retryhost_decide") (param i32) (result i32)
    (call $log (i32.const 0) (i32.const 0) (i32.const 7))
    (i32.const 0)))
