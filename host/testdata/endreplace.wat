;; endreplace.wat: PASSes every part, the finish included, and answers
;; retryhost_end with REPLACE [text-delta "LATE" in block "t"]: text added
;; after the guest let the finish go. Expected (ABI v1.3 §6.4): the
;; finish is still the stream's last part, after "LATE".
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; the Parts list: count 1, one 17-byte text-delta record
  (data (i32.const 256) "\01\00\00\00\11\00\00\00\04\00\00\00\01\00\00\00t\04\00\00\00LATE")
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 4096)))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_part") (param i64 i32) (result i64) (i64.const 0))
  (func (export "retryhost_end") (param i64) (result i64)
    (memory.copy (i32.const 1024) (i32.const 256) (i32.const 25))
    (i64.or (i64.shl (i64.const 25) (i64.const 32)) (i64.const 4)))
  (func (export "retryhost_close") (param i64)))
