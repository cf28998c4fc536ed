;; nokind.wat (hostile): a valid v1 module that is neither a condition nor a
;; transform. Expected: a load error (ErrNoKind).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536))))
