;; condition.wat: a well-behaved condition.
;; HTTP 429 -> retry, waiting the server's Retry-After, at most 3 attempts.
;; HTTP 5xx -> switch to the model named by the config (which must not be empty).
;; Anything else -> no opinion.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (import "retryhost_v1" "input" (func $input (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  ;; layout: 0..256 the fallback model (config), 1024.. scratch buffer (64 KiB)
  (global $model_len (mut i32) (i32.const 0))
  (data (i32.const 512) "config must name the fallback model")
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param $len i32) (result i32)
    (if (i32.lt_s (call $buffer (i32.const 1024) (i32.const 65536)) (i32.const 0))
      (then (return (i32.const -1))))
    (if (i32.or (i32.eqz (local.get $len)) (i32.gt_u (local.get $len) (i32.const 256)))
      (then
        (memory.copy (i32.const 1024) (i32.const 512) (i32.const 35))
        (return (i32.const 35))))
    (drop (call $input (i32.const 0) (i32.const 256)))
    (global.set $model_len (local.get $len))
    (i32.const 0))
  (func (export "retryhost_decide") (param $len i32) (result i32)
    (local $status i32)
    (local.set $status (i32.load16_u (i32.const 1028)))
    ;; zero the 32-byte decision header
    (memory.fill (i32.const 1024) (i32.const 0) (i32.const 32))
    (if (i32.eq (local.get $status) (i32.const 429))
      (then
        (i32.store8 (i32.const 1024) (i32.const 1))      ;; action retry
        (i32.store8 (i32.const 1025) (i32.const 1))      ;; use retry-after
        (i32.store (i32.const 1028) (i32.const 3))       ;; max attempts
        (i32.store (i32.const 1056) (i32.const 0))       ;; model ""
        (return (i32.const 36))))
    (if (i32.and (i32.ge_u (local.get $status) (i32.const 500)) (i32.lt_u (local.get $status) (i32.const 600)))
      (then
        (i32.store8 (i32.const 1024) (i32.const 2))      ;; action switch
        (i32.store (i32.const 1056) (global.get $model_len))
        (memory.copy (i32.const 1060) (i32.const 0) (global.get $model_len))
        (return (i32.add (i32.const 36) (global.get $model_len)))))
    (i32.const 0)))
