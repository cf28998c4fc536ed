/* finish: the finish-reason condition in C, deciding exactly as the Go build
 * (plugins/finish) with the same JSON config:
 *
 *   {"switch": {"content-filter": "provider/model", ...},
 *    "raw": {"PROVIDER_WORD": "provider/model"}, "max_attempts": n}
 *
 * It judges result attempts only (class none): the raw word's mapping
 * first, else the unified reason's; an unmapped reason or a target equal to
 * the attempt's own model gets no opinion; else a switch with max_attempts.
 * Limits (plugins/README.md): 64 raw words, 256 bytes a word or a model. */
#include "retryhost.h"
#include "json.h"
#include "attempt.h"

#define MAX_RAW 64
#define MAX_STR 256
#define MAX_ATTEMPTS 1000000

static const char *const reasons[8] = {"unknown", "stop", "length", "content-filter", "tool-calls", "error", "other", "refusal"};
static u8 by_reason[8][MAX_STR];
static u32 by_reason_len[8];
static u8 raw_word[MAX_RAW][MAX_STR], raw_model[MAX_RAW][MAX_STR];
static u32 raw_word_len[MAX_RAW], raw_model_len[MAX_RAW], nraw;
static i64 max_attempts;

static int model_str(u8 *out, u32 *n) {
	if (!str(out, MAX_STR, n, "a model is longer than 256 bytes")) return 0;
	if (*n == 0) return fail("empty model");
	return 1;
}

static int parse_config(i32 len) {
	int r = js_start(len);
	if (r < 0) return 0;
	if (r == 0) return fail("nothing to do: give \"switch\": {\"content-filter\": \"provider/model\", ...}");
	u32 seen = 0, count = 0, n;
	int any = 0;
	if (!obj_begin()) return 0;
	while (obj_next(&count)) {
		if (key_is("switch")) {
			u32 k = 0, got = 0;
			if (!field(&seen, 0, "switch") || !obj_begin()) return 0;
			while (obj_next(&k)) {
				u32 i = 1;
				while (i < 8 && !bytes_eq(js_key, js_keylen, reasons[i])) i++;
				if (i == 8) {
					J.key = (const u8 *)"switch";
					J.keylen = 6;
					fail("unknown finish reason ");
					em_quoted(js_key, js_keylen);
					return 0;
				}
				if (got & (1u << i)) return fail("duplicate field");
				got |= 1u << i;
				if (!model_str(by_reason[i], &by_reason_len[i])) return 0;
				any = 1;
			}
		} else if (key_is("raw")) {
			u32 k = 0;
			if (!field(&seen, 1, "raw") || !obj_begin()) return 0;
			while (obj_next(&k)) {
				if (nraw == MAX_RAW) return fail("more than 64 words");
				if (js_keylen == 0) return fail("empty finish word");
				for (u32 j = 0; j < nraw; j++)
					if (same(raw_word[j], raw_word_len[j], js_key, js_keylen)) return fail("duplicate field");
				rh_copy(raw_word[nraw], js_key, js_keylen);
				raw_word_len[nraw] = js_keylen;
				if (!model_str(raw_model[nraw], &raw_model_len[nraw])) return 0;
				nraw++;
				any = 1;
			}
		} else if (key_is("max_attempts")) {
			if (!field(&seen, 2, "max_attempts") || !integer(MAX_ATTEMPTS, &max_attempts, "want an integer 0-1000000")) return 0;
		} else {
			return unknown();
		}
		(void)n;
	}
	if (!js_finish()) return 0;
	if (!any) return fail("nothing to do: give \"switch\": {\"content-filter\": \"provider/model\", ...}");
	return 1;
}

RH_EXPORT("retryhost_init") i32 rh_init(i32 len) {
	if (rh_buffer(rh_buf, RH_BUF_CAP) != 0) return -1;
	if (!parse_config(len)) return (i32)em_len;
	return 0;
}

RH_EXPORT("retryhost_decide") i32 rh_decide(i32 len) {
	struct attempt a;
	if (!read_attempt(len, &a)) return -1;
	if (a.cls != 0) return 0;
	const u8 *m = 0;
	u32 mn = 0;
	for (u32 j = 0; j < nraw; j++)
		if (same(raw_word[j], raw_word_len[j], a.raw, a.raw_len)) { m = raw_model[j]; mn = raw_model_len[j]; }
	if (mn == 0 && a.finish < 8) { m = by_reason[a.finish]; mn = by_reason_len[a.finish]; }
	if (mn == 0 || same(m, mn, a.model, a.model_len)) return 0;
	return put_decision(RH_SWITCH, 0, (u32)max_attempts, 0, 0, 0.0, m, mn);
}
