;; growloop.wat (hostile): every decision grows its memory by one page, then
;; spins forever.
;; Expected: the watchdog stops it (ErrTimeout); closing a module whose
;; memory the guest has grown is race-free (see guestMemory).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (drop (call $buffer (i32.const 1024) (i32.const 65536)))
    (i32.const 0))
  (func (export "retryhost_decide") (param i32) (result i32)
    (loop $spin
      (drop (memory.grow (i32.const 1)))
      (br $spin))
    (i32.const 0)))
