/* status: a status-code condition in C, the proof that the ABI is not
 * Go-only. One rule, configured at load with key=value lines:
 *
 *   status=429,500-599   codes and ranges the rule matches (required)
 *   action=retry         retry | switch | give-up (required)
 *   model=openai/gpt-4o  the switch target (switch only, required there)
 *   delay_ms=250         base delay before the next attempt
 *   backoff=2            factor per earlier attempt (digits, optional .digits)
 *   max_attempts=3       attempts on the target model, counting earlier ones
 *   retry_after=1        wait the server's Retry-After when it sent one
 *   max_attempt=2        match only up to this attempt number (0 = any)
 *
 * Blank lines and lines starting with # are ignored; a line without =, an
 * unknown key, a key given twice or a bad value rejects the config, naming
 * the line. An attempt without an HTTP status or with
 * another one gets no opinion. Equivalent to the errmatch plugin with one
 * rule {"status": [...], "max_attempt": N, "<action>": {...}}. */
#include "retryhost.h"

#define MAX_RANGES 32
static struct { u16 lo, hi; } ranges[MAX_RANGES];
static u32 nranges;
static u8 action;
static u8 model[256];
static u32 model_len;
static i64 delay_ns;
static double backoff;
static u32 max_attempts, max_attempt;
static u8 retry_after;
static u8 cfg[4096];

static int eq(const u8 *s, u32 n, const char *lit) {
	u32 i = 0;
	for (; i < n; i++)
		if (!lit[i] || lit[i] != (char)s[i]) return 0;
	return lit[i] == 0;
}

/* num parses decimal digits; it returns 0 on an empty or bad or huge value. */
static int num(const u8 *s, u32 n, u64 *out) {
	u64 v = 0;
	if (n == 0 || n > 12) return 0;
	for (u32 i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') return 0;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 1;
}

static int parse_status(const u8 *s, u32 n) {
	u32 i = 0;
	if (n > 0 && s[n - 1] == ',') return 0; /* an empty last item */
	while (i < n) {
		u32 j = i;
		while (j < n && s[j] != ',') j++;
		u32 dash = i;
		while (dash < j && s[dash] != '-') dash++;
		u64 lo, hi;
		if (!num(s + i, dash - i, &lo)) return 0;
		hi = lo;
		if (dash < j && !num(s + dash + 1, j - dash - 1, &hi)) return 0;
		if (lo < 100 || hi > 999 || lo > hi || nranges == MAX_RANGES) return 0;
		ranges[nranges].lo = (u16)lo;
		ranges[nranges].hi = (u16)hi;
		nranges++;
		i = j + 1;
	}
	return nranges > 0;
}

static int parse_backoff(const u8 *s, u32 n) {
	u32 dot = 0;
	while (dot < n && s[dot] != '.') dot++;
	u64 ip, fp = 0, scale = 1;
	if (!num(s, dot, &ip)) return 0;
	if (dot < n) {
		if (!num(s + dot + 1, n - dot - 1, &fp)) return 0;
		for (u32 k = dot + 1; k < n; k++) scale *= 10;
	}
	backoff = (double)ip + (double)fp / (double)scale;
	return 1;
}

/* the keys seen, one bit each in the order of keys[]: a key given twice
 * is an error, not "the last one wins" */
static const char *const keys[] = {"status", "action", "model", "delay_ms", "backoff", "max_attempts", "max_attempt", "retry_after"};
static u32 seen;

static i32 reject_line(const char *msg, u32 line) {
	i32 n = rh_reject(msg);
	const char *at = " (line ";
	while (*at) rh_buf[n++] = (u8)*at++;
	char d[12];
	u32 k = 0;
	do { d[k++] = (char)('0' + line % 10); line /= 10; } while (line);
	while (k) rh_buf[n++] = (u8)d[--k];
	rh_buf[n++] = ')';
	return n;
}

static i32 parse_line(const u8 *s, u32 n, u32 line) {
	u32 eqi = 0;
	while (eqi < n && s[eqi] != '=') eqi++;
	if (eqi == n) return reject_line("config: want key=value lines", line);
	const u8 *k = s, *v = s + eqi + 1;
	u32 kn = eqi, vn = n - eqi - 1;
	u64 x;
	for (u32 b = 0; b < sizeof keys / sizeof keys[0]; b++) {
		if (!eq(k, kn, keys[b])) continue;
		if (seen & (1u << b)) return reject_line("config: a key is given twice", line);
		seen |= 1u << b;
	}
	if (eq(k, kn, "status")) {
		if (!parse_status(v, vn)) return reject_line("config: status: want codes 100-999 and lo-hi ranges, comma-separated", line);
	} else if (eq(k, kn, "action")) {
		if (eq(v, vn, "retry")) action = RH_RETRY;
		else if (eq(v, vn, "switch")) action = RH_SWITCH;
		else if (eq(v, vn, "give-up")) action = RH_GIVE_UP;
		else return reject_line("config: action: want retry, switch or give-up", line);
	} else if (eq(k, kn, "model")) {
		if (vn == 0 || vn > sizeof model) return reject_line("config: model: want 1 to 256 bytes", line);
		rh_copy(model, v, vn);
		model_len = vn;
	} else if (eq(k, kn, "delay_ms")) {
		if (!num(v, vn, &x)) return reject_line("config: delay_ms: want milliseconds", line);
		delay_ns = (i64)x * 1000000;
	} else if (eq(k, kn, "backoff")) {
		if (!parse_backoff(v, vn)) return reject_line("config: backoff: want a number such as 2 or 1.5", line);
	} else if (eq(k, kn, "max_attempts")) {
		if (!num(v, vn, &x) || x > 1000000) return reject_line("config: max_attempts: want a count", line);
		max_attempts = (u32)x;
	} else if (eq(k, kn, "max_attempt")) {
		if (!num(v, vn, &x) || x > 1000000) return reject_line("config: max_attempt: want an attempt number", line);
		max_attempt = (u32)x;
	} else if (eq(k, kn, "retry_after")) {
		if (eq(v, vn, "1") || eq(v, vn, "true")) retry_after = 1;
		else if (eq(v, vn, "0") || eq(v, vn, "false")) retry_after = 0;
		else return reject_line("config: retry_after: want true or false", line);
	} else {
		return reject_line("config: unknown key (want status, action, model, delay_ms, backoff, max_attempts, max_attempt, retry_after)", line);
	}
	return 0;
}

RH_EXPORT("retryhost_init") i32 rh_init(i32 len) {
	if (rh_buffer(rh_buf, RH_BUF_CAP) != 0) return -1;
	if (len < 0 || len > (i32)sizeof cfg) return rh_reject("config: longer than 4096 bytes");
	if (len > 0 && rh_input(cfg, len) != len) return -1;
	u32 i = 0, line = 1;
	while (i < (u32)len) {
		u32 j = i;
		while (j < (u32)len && cfg[j] != '\n') j++;
		u32 e = j;
		if (e > i && cfg[e - 1] == '\r') e--;
		if (e > i && cfg[i] != '#') {
			i32 r = parse_line(cfg + i, e - i, line);
			if (r != 0) return r;
		}
		i = j + 1;
		line++;
	}
	if (nranges == 0) return rh_reject("config: status is required");
	if (action == RH_NONE) return rh_reject("config: action is required");
	if (action == RH_SWITCH && model_len == 0) return rh_reject("config: switch: model is required");
	if (action != RH_SWITCH && model_len != 0) return rh_reject("config: model is for switch");
	return 0;
}

RH_EXPORT("retryhost_decide") i32 rh_decide(i32 len) {
	if (len < 80 || len > RH_BUF_CAP) return -1; /* an Attempt header is 80 bytes; ours fit the buffer */
	u32 number = rd32(rh_buf);
	u32 status = rd16(rh_buf + 4);
	u8 class = rh_buf[6];
	if (class == 0 || status == 0) return 0; /* a result attempt, or no HTTP status */
	if (max_attempt && number > max_attempt) return 0;
	int hit = 0;
	for (u32 i = 0; i < nranges; i++)
		if (ranges[i].lo <= status && status <= ranges[i].hi) hit = 1;
	if (!hit) return 0;
	/* The Decision record (ABI.md §8.2). */
	union { double f; u64 u; } b = {.f = backoff};
	rh_buf[0] = action;
	rh_buf[1] = retry_after;
	rh_buf[2] = rh_buf[3] = 0;
	wr32(rh_buf + 4, max_attempts);
	wr64(rh_buf + 8, (u64)delay_ns);
	wr64(rh_buf + 16, 0);
	wr64(rh_buf + 24, b.u);
	wr32(rh_buf + 32, model_len);
	rh_copy(rh_buf + 36, model, model_len);
	return 36 + (i32)model_len;
}
