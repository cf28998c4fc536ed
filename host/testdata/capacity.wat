;; capacity.wat (ABI v1.2): a transform with room for two streams per
;; instance. Config byte 0: 1 = declare max_streams 2 in its policy (the
;; host then never opens a third), 0 = declare nothing (it then refuses a
;; third with OpenNoRoom, -6). Either way a refusal is not a failure of
;; the plugin. Parts PASS.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (import "retryhost_v1" "input" (func $input (param i32 i32) (result i32)))
  (import "retryhost_v1" "policy" (func $policy (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (global $open (mut i32) (i32.const 0))
  (global $opens (export "opens") (mut i32) (i32.const 0))
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param $len i32) (result i32)
    (drop (call $buffer (i32.const 1024) (i32.const 4096)))
    (if (i32.ne (call $input (i32.const 0) (i32.const 1)) (i32.const 1)) (then (return (i32.const 0))))
    (if (i32.eqz (i32.load8_u (i32.const 0))) (then (return (i32.const 0))))
    ;; Policy: 24 zero bytes, flags 0, n 0, max_streams 2 (at 8192)
    (i32.store (i32.const 8224) (i32.const 2))
    (drop (call $policy (i32.const 8192) (i32.const 36)))
    (i32.const 0))
  (func (export "retryhost_open") (param i64 i32) (result i32)
    (global.set $opens (i32.add (global.get $opens) (i32.const 1)))
    (if (i32.ge_u (global.get $open) (i32.const 2)) (then (return (i32.const -6))))
    (global.set $open (i32.add (global.get $open) (i32.const 1)))
    (i32.const 0))
  (func (export "retryhost_part") (param i64 i32) (result i64) (i64.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64)
    (global.set $open (i32.sub (global.get $open) (i32.const 1)))))
