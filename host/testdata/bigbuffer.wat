;; bigbuffer.wat (hostile, ABI v1.2): registers a 16 MiB scratch buffer,
;; over the host's 1 MiB cap, ignores the StatusTooLarge it gets and
;; accepts its config. Expected: the load fails with ErrNoBuffer, saying
;; the buffer was too large.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 300)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (drop (call $buffer (i32.const 65536) (i32.const 16777216)))
    (i32.const 0))
  (func (export "retryhost_decide") (param i32) (result i32) (i32.const 0)))
