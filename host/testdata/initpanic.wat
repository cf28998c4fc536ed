;; initpanic.wat (hostile): panics (traps) in its init, as a Go guest whose
;; init panics does. Expected: a load error (ErrInit).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32) (unreachable))
  (func (export "retryhost_decide") (param i32) (result i32) (i32.const 0)))
