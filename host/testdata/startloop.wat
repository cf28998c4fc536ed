;; startloop.wat (hostile): a start function that loops forever. wazero runs
;; a start section inside instantiation, before any deadline.
;; Expected: refused at load, before anything runs (ErrStartSection).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func $forever (loop $l (br $l)))
  (start $forever)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_decide") (param i32) (result i32) (i32.const 0)))
