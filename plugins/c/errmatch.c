/* errmatch: the error-matching condition in C, deciding exactly as the Go
 * build (plugins/errmatch) with the same JSON config (plugins/README.md):
 *
 *   {"rules": [{match fields; one action}], "fail": "open"|"closed"}
 *
 * Match fields, all optional, ANDed: "status" (codes and "lo-hi" ranges),
 * "class" (error class names), "message" and "error_name" (patterns in the
 * RE2 subset of regex.h, matched anywhere), "model" (a path.Match glob),
 * "min_attempt", "max_attempt". Action, exactly one: "retry" or "switch"
 * ({"model", "delay", "backoff", "max_attempts", "timeout", "retry_after"})
 * or "give_up": true. The first rule that matches a failed attempt decides;
 * a result attempt (no error) or no match is no opinion.
 *
 * Limits (plugins/README.md): 64 rules; per rule 32 status items and 16
 * classes; 256 bytes a model or glob; the regex limits of regex.h. */
#include "retryhost.h"
#include "json.h"
#include "attempt.h"
#include "regex.h"
#include "glob.h"

#define MAX_RULES 64
#define MAX_STATUS 32
#define MAX_CLASSES 16
#define MAX_STR 256
#define MAX_COUNT 1000000

static const char *const classes[15] = {"none", "unknown", "timeout", "canceled", "rate-limit", "overloaded", "server", "client",
                                        "auth", "context-length", "content-filter", "refusal", "network", "transform", "plugin"};

struct rule {
	u16 lo[MAX_STATUS], hi[MAX_STATUS];
	u32 nstatus;
	u32 classes; /* bit per class; 0 = any */
	u32 message, ename; /* program starts, RE_NONE = any */
	u8 glob[MAX_STR];
	u32 glob_len;
	i64 min, max;
	/* the decision */
	u8 action, retry_after;
	i64 max_attempts, delay, timeout;
	double backoff;
	u8 model[MAX_STR];
	u32 model_len;
};
static struct rule rules[MAX_RULES];
static u32 nrules;
static u8 fail_closed;
static u8 sbuf[MAX_PATTERN];

static int digits3(const u8 *s, u32 *v) {
	for (u32 k = 0; k < 3; k++)
		if (s[k] < '0' || s[k] > '9') return 0;
	*v = (u32)(s[0] - '0') * 100 + (u32)(s[1] - '0') * 10 + (u32)(s[2] - '0');
	return 1;
}

/* status_item reads 429, "429" or "500-599". */
static NOINLINE int status_item(struct rule *r) {
	static const char *msg = "want a code 100-999 or a \"lo-hi\" range";
	u32 lo, hi;
	if (peek() == '"') {
		u8 b[16];
		u32 n;
		if (!str(b, sizeof b, &n, msg)) return 0;
		if (n == 3 && digits3(b, &lo)) hi = lo;
		else if (!(n == 7 && b[3] == '-' && digits3(b, &lo) && digits3(b + 4, &hi))) return fail(msg);
	} else {
		i64 v;
		if (!integer(999, &v, msg)) return 0;
		lo = hi = (u32)v;
	}
	if (lo < 100 || hi > 999 || lo > hi) return fail(msg);
	if (r->nstatus == MAX_STATUS) return fail("more than 32 items");
	r->lo[r->nstatus] = (u16)lo;
	r->hi[r->nstatus] = (u16)hi;
	r->nstatus++;
	return 1;
}

static int pattern(u32 *out) {
	u32 n;
	if (!str(sbuf, sizeof sbuf, &n, "longer than 512 bytes")) return 0;
	if (n == 0) return 1; /* "" is no constraint */
	const char *why;
	*out = re_compile(sbuf, n, &why);
	if (*out == RE_NONE) return fail(why);
	return 1;
}

static NOINLINE int action(struct rule *r, u8 a) {
	u32 seen = 0, count = 0;
	int ra;
	if (!obj_begin()) return 0;
	r->action = a;
	while (obj_next(&count)) {
		if (key_is("model")) {
			if (!field(&seen, 0, "model") || !str(r->model, MAX_STR, &r->model_len, "a model is longer than 256 bytes")) return 0;
		} else if (key_is("delay")) {
			if (!field(&seen, 1, "delay") || !dur(&r->delay, "want a non-negative Go duration such as \"500ms\"")) return 0;
		} else if (key_is("backoff")) {
			if (!field(&seen, 2, "backoff") || !factor(&r->backoff, "want a number with at most 15 significant digits and a small exponent, such as 1.5")) return 0;
			if (r->backoff < 0) return fail("must not be negative");
		} else if (key_is("max_attempts")) {
			if (!field(&seen, 3, "max_attempts") || !integer(MAX_COUNT, &r->max_attempts, "want an integer 0-1000000")) return 0;
		} else if (key_is("timeout")) {
			if (!field(&seen, 4, "timeout") || !dur(&r->timeout, "want a non-negative Go duration such as \"500ms\"")) return 0;
		} else if (key_is("retry_after")) {
			if (!field(&seen, 5, "retry_after") || !boolean(&ra)) return 0;
			r->retry_after = (u8)ra;
		} else {
			return unknown();
		}
	}
	if (J.bad) return 0;
	J.key = a == RH_SWITCH ? (const u8 *)"switch" : (const u8 *)"retry";
	J.keylen = a == RH_SWITCH ? 6 : 5;
	if (a == RH_SWITCH && r->model_len == 0) return fail("model is required");
	if (a == RH_RETRY && r->model_len != 0) return fail("model is for switch");
	return 1;
}

static NOINLINE int parse_rule(struct rule *r) {
	u32 seen = 0, count = 0, k, n, actions = 0;
	int b;
	r->message = r->ename = RE_NONE;
	if (!obj_begin()) return 0;
	while (obj_next(&count)) {
		if (key_is("status")) {
			if (!field(&seen, 0, "status") || !arr_begin()) return 0;
			k = 0;
			while (arr_next(&k))
				if (!status_item(r)) return 0;
		} else if (key_is("class")) {
			if (!field(&seen, 1, "class") || !arr_begin()) return 0;
			k = 0;
			while (arr_next(&k)) {
				u8 name[32];
				if (!str(name, sizeof name, &n, "unknown class")) return 0;
				if (k > MAX_CLASSES) return fail("more than 16 items");
				u32 c = 1;
				while (c < 15 && !bytes_eq(name, n, classes[c])) c++;
				if (c == 15) {
					fail("unknown class ");
					em_quoted(name, n);
					return 0;
				}
				r->classes |= 1u << c;
			}
		} else if (key_is("message")) {
			if (!field(&seen, 2, "message") || !pattern(&r->message)) return 0;
		} else if (key_is("error_name")) {
			if (!field(&seen, 3, "error_name") || !pattern(&r->ename)) return 0;
		} else if (key_is("model")) {
			if (!field(&seen, 4, "model") || !str(r->glob, MAX_STR, &r->glob_len, "a glob is longer than 256 bytes")) return 0;
			int bad;
			glob_match(r->glob, r->glob_len, (const u8 *)"", 0, &bad);
			if (bad) return fail("syntax error in pattern");
		} else if (key_is("min_attempt")) {
			if (!field(&seen, 5, "min_attempt") || !integer(MAX_COUNT, &r->min, "want an integer 0-1000000")) return 0;
		} else if (key_is("max_attempt")) {
			if (!field(&seen, 6, "max_attempt") || !integer(MAX_COUNT, &r->max, "want an integer 0-1000000")) return 0;
		} else if (key_is("retry")) {
			actions++;
			if (!field(&seen, 7, "retry") || !action(r, RH_RETRY)) return 0;
		} else if (key_is("switch")) {
			actions++;
			if (!field(&seen, 8, "switch") || !action(r, RH_SWITCH)) return 0;
		} else if (key_is("give_up")) {
			if (!field(&seen, 9, "give_up") || !boolean(&b)) return 0;
			if (b) {
				actions++;
				r->action = RH_GIVE_UP;
			}
		} else {
			return unknown();
		}
	}
	if (J.bad) return 0;
	J.key = 0;
	if (r->max > 0 && r->max < r->min) return fail("min_attempt/max_attempt: want 0 <= min <= max");
	if (actions != 1) return fail("want exactly one of retry, switch, give_up");
	if (r->action == RH_GIVE_UP) { /* give_up carries nothing */
		r->retry_after = 0;
		r->max_attempts = r->delay = r->timeout = 0;
		r->backoff = 0;
		r->model_len = 0;
	}
	return 1;
}

static NOINLINE int parse_config(i32 len) {
	int r = js_start(len);
	if (r < 0) return 0;
	if (r == 0) return fail("no rules");
	u32 seen = 0, count = 0, n;
	if (!obj_begin()) return 0;
	while (obj_next(&count)) {
		if (key_is("rules")) {
			if (!field(&seen, 0, "rules") || !arr_begin()) return 0;
			u32 k = 0;
			while (arr_next(&k)) {
				if (nrules == MAX_RULES) return fail("more than 64 rules");
				J.item = (i32)nrules;
				if (!parse_rule(&rules[nrules])) return 0;
				J.item = -1;
				nrules++;
				J.key = (const u8 *)"rules";
				J.keylen = 5;
			}
		} else if (key_is("fail")) {
			if (!field(&seen, 1, "fail") || !str(sbuf, 16, &n, "must be \"open\" or \"closed\"")) return 0;
			if (bytes_eq(sbuf, n, "closed")) fail_closed = 1;
			else if (n != 0 && !bytes_eq(sbuf, n, "open")) return fail("must be \"open\" or \"closed\"");
		} else {
			return unknown();
		}
	}
	if (!js_finish()) return 0;
	if (nrules == 0) return fail("no rules");
	return 1;
}

RH_EXPORT("retryhost_init") i32 rh_init(i32 len) {
	if (rh_buffer(rh_buf, RH_BUF_CAP) != 0) return -1;
	if (!parse_config(len)) {
		if (J.bad) return (i32)em_len;
		return rh_reject("config: rejected");
	}
	static u8 pol[24];
	pol[0] = fail_closed;
	rh_policy(pol, sizeof pol);
	return 0;
}

static int matches(const struct rule *r, const struct attempt *a) {
	if (r->nstatus) {
		int ok = 0;
		for (u32 k = 0; k < r->nstatus; k++) ok = ok || (r->lo[k] <= a->status && a->status <= r->hi[k]);
		if (!ok) return 0;
	}
	if (r->classes && !(a->cls < 32 && (r->classes >> a->cls & 1))) return 0;
	if ((i64)a->number < r->min || (r->max > 0 && (i64)a->number > r->max)) return 0;
	if (r->glob_len) {
		int bad;
		if (!glob_match(r->glob, r->glob_len, a->model, a->model_len, &bad)) return 0;
	}
	if (r->message != RE_NONE && !re_match(r->message, a->msg, a->msg_len)) return 0;
	if (r->ename != RE_NONE && !re_match(r->ename, a->ename, a->ename_len)) return 0;
	return 1;
}

RH_EXPORT("retryhost_decide") i32 rh_decide(i32 len) {
	struct attempt a;
	if (!read_attempt(len, &a)) return -1;
	if (a.cls == 0) return 0;
	for (u32 k = 0; k < nrules; k++) {
		const struct rule *r = &rules[k];
		if (matches(r, &a))
			return put_decision(r->action, r->retry_after, (u32)r->max_attempts, r->delay, r->timeout, r->backoff, r->model, r->model_len);
	}
	return 0;
}
