;; boom.wat (hostile, selective): a pass-through transform that traps when a
;; text-delta is exactly "boom". Used to show that a trap fails only the
;; streams whose state lived in the trapped instance.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  (func (export "retryhost_part") (param i64 i32) (result i64)
    (local $idlen i32) (local $d i32)
    (if (i32.ne (i32.load8_u (i32.const 1024)) (i32.const 4)) (then (return (i64.const 0))))
    (local.set $idlen (i32.load (i32.const 1028)))
    (local.set $d (i32.add (i32.const 1032) (local.get $idlen)))
    (if (i32.and
          (i32.eq (i32.load (local.get $d)) (i32.const 4))
          (i32.eq (i32.load (i32.add (local.get $d) (i32.const 4))) (i32.const 0x6d6f6f62))) ;; "boom"
      (then (unreachable)))
    (i64.const 0)))
