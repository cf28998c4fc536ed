;; oob.wat (hostile): registers a scratch buffer outside its memory and
;; ignores the StatusFault, then accepts its config. Expected: a load error
;; (ErrNoBuffer): the host never writes outside guest memory.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (drop (call $buffer (i32.const 0x7fff0000) (i32.const 65536)))
    (i32.const 0))
  (func (export "retryhost_decide") (param i32) (result i32) (i32.const 0)))
