;; errclass.wat (ABI v1.2): answers every text-delta ERROR with a short
;; Error record: header (kind 0, class 8 = auth, code 7) and the message
;; "blocked", without the optional phrase and text. Expected: a
;; *abi.TransformError of class transform (a guest may not claim auth),
;; code 7, message "blocked"; not an ABI violation. Other parts PASS.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\00\08\00\00\07\00\00\00\07\00\00\00blocked")
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 4096)))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  (func (export "retryhost_part") (param i64 i32) (result i64)
    (if (i32.ne (i32.load8_u (i32.const 1024)) (i32.const 4)) (then (return (i64.const 0))))
    (memory.copy (i32.const 1024) (i32.const 0) (i32.const 19))
    ;; ERROR (2) with a 19-byte payload
    (i64.const 0x0000001300000002)))
