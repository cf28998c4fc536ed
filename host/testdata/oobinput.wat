;; oobinput.wat (hostile): hands the host out-of-bounds pointers at call time.
;; retryhost_decide asks for its input at an address outside its memory,
;; logs from outside its memory, tries to move its buffer outside memory,
;; and returns the input import's status. Expected: the host never reads or
;; writes outside guest memory; the imports answer StatusFault (-1), which
;; this guest returns, so Decide fails with ErrPluginFailed (StatusFault).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (import "retryhost_v1" "input" (func $input (param i32 i32) (result i32)))
  (import "retryhost_v1" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_decide") (param i32) (result i32)
    (call $log (i32.const 0) (i32.const 0x7ffffff0) (i32.const 64))
    (if (i32.ne (call $buffer (i32.const 0x7fff0000) (i32.const 65536)) (i32.const -1))
      (then (unreachable)))
    (call $input (i32.const 0x7fff0000) (i32.const 65536))))
