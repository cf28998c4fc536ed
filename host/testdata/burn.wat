;; burn.wat: a compliant but slow condition. retryhost_decide spins for
;; the Attempt's number × 1000 iterations of a multiply-add (so the test
;; sets the CPU time of a call through the input) and answers "no opinion".
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $sink (export "sink") (mut i64) (i64.const 0))
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 4096)))
  (func (export "retryhost_decide") (param i32) (result i32)
    (local $n i64) (local $x i64)
    (local.set $n (i64.mul (i64.extend_i32_u (i32.load (i32.const 1024))) (i64.const 1000)))
    (local.set $x (i64.const 1))
    (block $done
      (loop $next
        (br_if $done (i64.eqz (local.get $n)))
        (local.set $x (i64.add (i64.mul (local.get $x) (i64.const 6364136223846793005)) (i64.const 1442695040888963407)))
        (local.set $n (i64.sub (local.get $n) (i64.const 1)))
        (br $next)))
    (global.set $sink (local.get $x))
    (i32.const 0)))
