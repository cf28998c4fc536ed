;; hog.wat (hostile): every decision grows its memory a page at a time until
;; growth fails, keeps what it got and has no opinion: each of its pooled
;; instances ends up holding all the memory the host lets it have.
;; Expected: the instances together hold no more than the plugin's memory
;; total (host.WithPluginMemory), not instances × the per-instance limit.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 4096)))
  (func (export "retryhost_decide") (param i32) (result i32)
    (loop $grow
      (br_if $grow (i32.ge_s (memory.grow (i32.const 1)) (i32.const 0))))
    (i32.const 0)))
