;; flaky.wat: a condition that is broken for some inputs. retryhost_decide
;; traps when the Attempt's number is 100 or more and answers "no opinion"
;; otherwise: the breaker tests make it "broken" and "recovered" at will.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 4096)))
  (func (export "retryhost_decide") (param i32) (result i32)
    (if (i32.ge_u (i32.load (i32.const 1024)) (i32.const 100)) (then unreachable))
    (i32.const 0)))
