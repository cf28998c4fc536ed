/* attempt.h: the Attempt record (ABI.md §8.1) and the Decision record
 * (§8.2) for the C conditions. Include after retryhost.h. */
#ifndef RH_ATTEMPT_H
#define RH_ATTEMPT_H

struct attempt {
	u32 number;
	u16 status;
	u8 cls, finish;
	const u8 *model, *ename, *msg, *raw;
	u32 model_len, ename_len, msg_len, raw_len;
};

/* An Attempt larger than the scratch buffer (a huge error message) is read
 * with `input` into pages grown for it, kept for the next one. */
static u8 *big;
static u32 big_cap;

static const u8 *attempt_bytes(i32 len) {
	if (len < 0) return 0;
	if (len <= RH_BUF_CAP) return rh_buf;
	if ((u32)len > big_cap) {
		u32 pages = ((u32)len - big_cap + 65535) / 65536;
		long old = __builtin_wasm_memory_grow(0, pages);
		if (old < 0) return 0;
		if (!big) big = (u8 *)(old * 65536); /* nothing else grows memory: the pages are contiguous */
		big_cap += pages * 65536;
	}
	if (rh_input(big, len) != len) return 0;
	return big;
}

static int take_str(const u8 *b, u32 len, u32 *off, const u8 **s, u32 *n) {
	if (len - *off < 4) return 0;
	u32 k = rd32(b + *off);
	*off += 4;
	if (k > len - *off) return 0;
	*s = b + *off;
	*n = k;
	*off += k;
	return 1;
}

/* read_attempt decodes the fields the conditions use; 0 if malformed. */
static int read_attempt(i32 len, struct attempt *a) {
	const u8 *b = attempt_bytes(len);
	if (!b || len < 80) return 0;
	a->number = rd32(b);
	a->status = rd16(b + 4);
	a->cls = b[6];
	a->finish = b[9];
	u32 off = 80;
	return take_str(b, (u32)len, &off, &a->model, &a->model_len) && take_str(b, (u32)len, &off, &a->ename, &a->ename_len) &&
	       take_str(b, (u32)len, &off, &a->msg, &a->msg_len) && take_str(b, (u32)len, &off, &a->raw, &a->raw_len);
}

/* put_decision writes a Decision record at the start of the buffer and
 * returns its length. */
static i32 put_decision(u8 action, u8 retry_after, u32 max_attempts, i64 delay, i64 timeout, double backoff,
                        const u8 *model, u32 model_len) {
	union { double f; u64 u; } bits = {.f = backoff};
	u8 *o = rh_buf;
	o[0] = action;
	o[1] = retry_after;
	o[2] = o[3] = 0;
	wr32(o + 4, max_attempts);
	wr64(o + 8, (u64)delay);
	wr64(o + 16, (u64)timeout);
	wr64(o + 24, bits.u);
	wr32(o + 32, model_len);
	__builtin_memmove(o + 36, model, model_len); /* the model may live in the buffer */
	return 36 + (i32)model_len;
}

static int same(const u8 *a, u32 an, const u8 *b, u32 bn) {
	if (an != bn) return 0;
	for (u32 i = 0; i < an; i++)
		if (a[i] != b[i]) return 0;
	return 1;
}

#endif
