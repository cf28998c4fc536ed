;; wrongabi.wat (hostile): built for a future ABI v2 (imports retryhost_v2,
;; exports retryhost_abi_v2). Expected: a load error (ErrABIVersion).
(module
  (import "retryhost_v2" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "retryhost_abi_v2"))
  (func (export "retryhost_init") (param i32) (result i32) (i32.const 0))
  (func (export "retryhost_decide") (param i32) (result i32) (i32.const 0)))
