;; initloop.wat (hostile): retryhost_init loops forever.
;; Expected: in guarded mode the init deadline (or the Load context, if it
;; ends first) stops it; Load fails with ErrInit (or the context's error).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (loop $forever (br $forever)) (i32.const 0))
  (func (export "retryhost_decide") (param i32) (result i32) (i32.const 0)))
