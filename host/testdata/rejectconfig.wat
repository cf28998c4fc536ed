;; rejectconfig.wat (hostile): rejects every config with a reason.
;; Expected: a load error (ErrConfigRejected) carrying "bad config!!".
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (data (i32.const 0) "bad config!!")
  (func (export "retryhost_init") (param i32) (result i32)
    (drop (call $buffer (i32.const 1024) (i32.const 65536)))
    (memory.copy (i32.const 1024) (i32.const 0) (i32.const 12))
    (i32.const 12))
  (func (export "retryhost_decide") (param i32) (result i32) (i32.const 0)))
