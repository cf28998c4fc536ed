/* json.h: the strict JSON config reader shared by the C guests, and the
 * value parsers their configs need (Go durations, integers, a backoff
 * factor). It accepts exactly what the Go builds' sdk.DecodeJSON accepts
 * for the same schema:
 *   - RFC 8259 JSON, valid UTF-8, one object (or an empty or all-white-space
 *     config: the defaults); nothing after it;
 *   - keys match field names exactly (case counts), each at most once per
 *     object; an unknown key is an error;
 *   - null is not a value (leave a field out instead);
 *   - \u escapes decode as encoding/json does (a lone surrogate is U+FFFD).
 * A failure writes "config: ..." at the start of the scratch buffer (the
 * reason retryhost_init returns) and makes every later read fail, so a
 * parser can check once, at the end. Include after retryhost.h. */
#ifndef RH_JSON_H
#define RH_JSON_H

/* The largest config, in bytes (documented in plugins/README.md). */
#define CFG_CAP 65536
static u8 cfg[CFG_CAP];

static struct {
	const u8 *s;
	u32 n, i;
	int bad;
	const u8 *key; /* the field being read, for messages */
	u32 keylen;
	i32 item; /* the list item being read (errmatch's rule), or -1 */
} J = {.item = -1};

/* ---- messages ---- */

static u32 em_len;
static void em_str(const char *s) {
	while (*s && em_len < 1000) rh_buf[em_len++] = (u8)*s++;
}
static void em_quoted(const u8 *s, u32 n) {
	em_str("\"");
	for (u32 i = 0; i < n && em_len < 1000; i++) {
		u8 c = s[i];
		if (c < 0x20 || c == '"' || c == '\\') {
			static const char hex[] = "0123456789abcdef";
			em_str("\\x");
			rh_buf[em_len++] = hex[c >> 4];
			rh_buf[em_len++] = hex[c & 15];
		} else {
			rh_buf[em_len++] = c;
		}
	}
	em_str("\"");
}
static void em_u64(u64 v) {
	char d[24];
	u32 k = 0;
	do { d[k++] = (char)('0' + v % 10); v /= 10; } while (v);
	while (k && em_len < 1000) rh_buf[em_len++] = (u8)d[--k];
}

/* fail records the first failure, naming the field being read. It returns 0
 * so a reader can `return fail(...)`. */
static int fail(const char *msg) {
	if (J.bad) return 0;
	J.bad = 1;
	em_len = 0;
	em_str("config: ");
	if (J.item >= 0) {
		em_str("rule ");
		em_u64((u64)J.item);
		em_str(": ");
	}
	if (J.key) {
		em_quoted(J.key, J.keylen);
		em_str(": ");
	}
	em_str(msg);
	return 0;
}

static int syntax(void) {
	if (J.bad) return 0;
	J.key = 0;
	fail("invalid JSON at byte ");
	em_u64(J.i);
	return 0;
}

/* ---- UTF-8 ---- */

/* utf8_next decodes one rune of s[0:n] (n >= 1) as Go's utf8.DecodeRune:
 * an invalid or cut sequence is U+FFFD of size 1. */
static u32 utf8_next(const u8 *s, u32 n, u32 *size) {
	u8 c = s[0], lo = 0x80, hi = 0xbf;
	*size = 1;
	if (c < 0x80) return c;
	if (c < 0xc2 || c > 0xf4) return 0xfffd;
	if (c < 0xe0) {
		if (n < 2 || s[1] < lo || s[1] > hi) return 0xfffd;
		*size = 2;
		return (u32)(c & 0x1f) << 6 | (s[1] & 0x3f);
	}
	if (c < 0xf0) {
		if (c == 0xe0) lo = 0xa0; else if (c == 0xed) hi = 0x9f;
		if (n < 3 || s[1] < lo || s[1] > hi || s[2] < 0x80 || s[2] > 0xbf) return 0xfffd;
		*size = 3;
		return (u32)(c & 0x0f) << 12 | (u32)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
	}
	if (c == 0xf0) lo = 0x90; else if (c == 0xf4) hi = 0x8f;
	if (n < 4 || s[1] < lo || s[1] > hi || s[2] < 0x80 || s[2] > 0xbf || s[3] < 0x80 || s[3] > 0xbf) return 0xfffd;
	*size = 4;
	return (u32)(c & 0x07) << 18 | (u32)(s[1] & 0x3f) << 12 | (u32)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
}

static u32 utf8_put(u8 *d, u32 r) {
	if (r < 0x80) { d[0] = (u8)r; return 1; }
	if (r < 0x800) { d[0] = 0xc0 | r >> 6; d[1] = 0x80 | (r & 0x3f); return 2; }
	if (r < 0x10000) { d[0] = 0xe0 | r >> 12; d[1] = 0x80 | (r >> 6 & 0x3f); d[2] = 0x80 | (r & 0x3f); return 3; }
	d[0] = 0xf0 | r >> 18; d[1] = 0x80 | (r >> 12 & 0x3f); d[2] = 0x80 | (r >> 6 & 0x3f); d[3] = 0x80 | (r & 0x3f);
	return 4;
}

/* utf8_valid reports whether s[0:n] is valid UTF-8 (Go's utf8.Valid). */
static int utf8_valid(const u8 *s, u32 n) {
	for (u32 i = 0, size; i < n; i += size) {
		u32 r = utf8_next(s + i, n - i, &size);
		if (r == 0xfffd && size == 1) return 0;
	}
	return 1;
}

/* ---- the reader ---- */

static int js_space(u8 c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void ws(void) {
	while (J.i < J.n && js_space(J.s[J.i])) J.i++;
}

static int peek(void) {
	ws();
	return J.bad || J.i >= J.n ? -1 : J.s[J.i];
}

static int eat(u8 c) {
	if (peek() != c) return 0;
	J.i++;
	return 1;
}

/* js_start reads config_len bytes of config; it returns 1 for a config
 * to parse (then call obj_begin), 0 for an empty or blank one (the
 * defaults), -1 on a failure (the reason is in the buffer). */
static int js_start(i32 len) {
	if (len < 0 || len > CFG_CAP) {
		em_len = 0;
		em_str("config: longer than 65536 bytes");
		J.bad = 1;
		return -1;
	}
	if (len > 0 && rh_input(cfg, len) != len) {
		em_len = 0;
		em_str("config: could not be read");
		J.bad = 1;
		return -1;
	}
	J.s = cfg;
	J.n = (u32)len;
	J.i = 0;
	if (!utf8_valid(cfg, (u32)len)) {
		fail("not valid UTF-8");
		return -1;
	}
	return peek() < 0 ? 0 : 1;
}

/* js_finish checks nothing follows the top-level value. */
static int js_finish(void) {
	J.key = 0;
	if (J.bad) return 0;
	if (peek() >= 0) return syntax();
	return 1;
}

static int hex4(u32 at, u32 *out) {
	if (at + 4 > J.n) return 0;
	u32 v = 0;
	for (u32 k = 0; k < 4; k++) {
		u8 c = J.s[at + k];
		v <<= 4;
		if (c >= '0' && c <= '9') v |= c - '0';
		else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
		else return 0;
	}
	*out = v;
	return 1;
}

/* str reads a string into out (at most cap bytes once decoded; longer is
 * a failure with the message toolong). */
static NOINLINE int str(u8 *out, u32 cap, u32 *len, const char *toolong) {
	if (J.bad) return 0;
	if (peek() == 'n') return fail("null is not a value: leave the field out");
	if (!eat('"')) return fail("want a string");
	u32 o = 0;
	for (;;) {
		if (J.i >= J.n) return syntax();
		u8 c = J.s[J.i];
		if (c == '"') { J.i++; break; }
		if (c < 0x20) return syntax();
		u8 tmp[4];
		u32 k = 0;
		if (c != '\\') {
			tmp[0] = c;
			k = 1;
			J.i++;
		} else {
			if (J.i + 1 >= J.n) return syntax();
			u8 e = J.s[J.i + 1];
			J.i += 2;
			switch (e) {
			case '"': case '\\': case '/': tmp[0] = e; k = 1; break;
			case 'b': tmp[0] = 8; k = 1; break;
			case 'f': tmp[0] = 12; k = 1; break;
			case 'n': tmp[0] = 10; k = 1; break;
			case 'r': tmp[0] = 13; k = 1; break;
			case 't': tmp[0] = 9; k = 1; break;
			case 'u': {
				u32 r, r2;
				if (!hex4(J.i, &r)) { J.i -= 2; return syntax(); }
				J.i += 4;
				if (r >= 0xd800 && r < 0xe000) {
					/* encoding/json: a pair decodes; anything else is U+FFFD
					 * and the next escape is read on its own */
					if (r < 0xdc00 && J.i + 6 <= J.n && J.s[J.i] == '\\' && J.s[J.i + 1] == 'u' &&
					    hex4(J.i + 2, &r2) && r2 >= 0xdc00 && r2 < 0xe000) {
						r = 0x10000 + ((r - 0xd800) << 10) + (r2 - 0xdc00);
						J.i += 6;
					} else {
						r = 0xfffd;
					}
				}
				k = utf8_put(tmp, r);
				break;
			}
			default:
				J.i -= 2;
				return syntax();
			}
		}
		if (o + k > cap) return fail(toolong);
		for (u32 j = 0; j < k; j++) out[o++] = tmp[j];
	}
	*len = o;
	return 1;
}

/* number reads a JSON number literal: its bytes are s[*at : *at+*len];
 * *frac reports a fraction or an exponent. */
static NOINLINE int number(u32 *at, u32 *len, int *frac) {
	if (J.bad) return 0;
	int c = peek();
	if (c == 'n') return fail("null is not a value: leave the field out");
	if (c != '-' && !(c >= '0' && c <= '9')) return fail("want a number");
	u32 b = J.i, i = J.i;
	*frac = 0;
	if (J.s[i] == '-') i++;
	if (i >= J.n) { J.i = i; return syntax(); }
	if (J.s[i] == '0') i++;
	else if (J.s[i] >= '1' && J.s[i] <= '9') while (i < J.n && J.s[i] >= '0' && J.s[i] <= '9') i++;
	else { J.i = i; return syntax(); }
	if (i < J.n && J.s[i] == '.') {
		i++;
		*frac = 1;
		if (i >= J.n || J.s[i] < '0' || J.s[i] > '9') { J.i = i; return syntax(); }
		while (i < J.n && J.s[i] >= '0' && J.s[i] <= '9') i++;
	}
	if (i < J.n && (J.s[i] == 'e' || J.s[i] == 'E')) {
		i++;
		*frac = 1;
		if (i < J.n && (J.s[i] == '+' || J.s[i] == '-')) i++;
		if (i >= J.n || J.s[i] < '0' || J.s[i] > '9') { J.i = i; return syntax(); }
		while (i < J.n && J.s[i] >= '0' && J.s[i] <= '9') i++;
	}
	*at = b;
	*len = i - b;
	J.i = i;
	return 1;
}

/* integer reads an integer in [0, max] (encoding/json's int: no fraction,
 * no exponent; then the plugin's bound). */
static int integer(i64 max, i64 *out, const char *msg) {
	u32 at, len;
	int frac;
	if (!number(&at, &len, &frac)) return 0;
	if (frac) return fail(msg);
	const u8 *s = J.s + at;
	int neg = s[0] == '-';
	u64 v = 0;
	for (u32 k = neg; k < len; k++) {
		if (v > 100000000000000000ull) return fail(msg); /* far past any bound */
		v = v * 10 + (s[k] - '0');
	}
	if (neg && v != 0) return fail(msg);
	if (v > (u64)max) return fail(msg);
	*out = (i64)v;
	return 1;
}

static int boolean(int *out) {
	if (J.bad) return 0;
	int c = peek();
	if (c == 'n') return fail("null is not a value: leave the field out");
	if (c == 't' && J.i + 4 <= J.n && J.s[J.i + 1] == 'r' && J.s[J.i + 2] == 'u' && J.s[J.i + 3] == 'e') { J.i += 4; *out = 1; return 1; }
	if (c == 'f' && J.i + 5 <= J.n && J.s[J.i + 1] == 'a' && J.s[J.i + 2] == 'l' && J.s[J.i + 3] == 's' && J.s[J.i + 4] == 'e') { J.i += 5; *out = 0; return 1; }
	return fail("want true or false");
}

/* obj_begin reads '{'; obj_next then reads each key into js_key (a key is
 * at most 256 bytes: no field name is near, and a map's keys are bounded
 * so) and returns 1,
 * or 0 at '}' or on a failure. *count is the members read so far. */
static int obj_begin(void) {
	if (J.bad) return 0;
	if (peek() == 'n') return fail("null is not a value: leave the field out");
	if (!eat('{')) return fail("want a JSON object");
	return 1;
}

static u8 js_key[256];
static u32 js_keylen;

static int obj_next(u32 *count) {
	if (J.bad) return 0;
	if (eat('}')) return 0;
	if (*count > 0 && !eat(',')) return syntax();
	if (peek() != '"') return syntax();
	const u8 *save = J.key;
	u32 savelen = J.keylen;
	J.key = 0;
	if (!str(js_key, sizeof js_key, &js_keylen, "a key is longer than 256 bytes")) return 0;
	J.key = save;
	J.keylen = savelen;
	if (!eat(':')) return syntax();
	(*count)++;
	return 1;
}

static int arr_begin(void) {
	if (J.bad) return 0;
	if (peek() == 'n') return fail("null is not a value: leave the field out");
	if (!eat('[')) return fail("want a JSON array");
	return 1;
}

static int arr_next(u32 *count) {
	if (J.bad) return 0;
	if (eat(']')) return 0;
	if (*count > 0 && !eat(',')) return syntax();
	(*count)++;
	return 1;
}

static int key_is(const char *name) {
	u32 i = 0;
	for (; i < js_keylen; i++)
		if (!name[i] || name[i] != (char)js_key[i]) return 0;
	return name[i] == 0;
}

/* field marks a known key as seen (bit in *seen) and names it in messages;
 * a second occurrence is a failure. */
static int field(u32 *seen, u32 bit, const char *name) {
	J.key = (const u8 *)name;
	J.keylen = 0;
	while (name[J.keylen]) J.keylen++;
	if (*seen & (1u << bit)) return fail("duplicate field");
	*seen |= 1u << bit;
	return 1;
}

static int unknown(void) {
	J.key = 0;
	fail("unknown field ");
	em_quoted(js_key, js_keylen);
	return 0;
}

static int bytes_eq(const u8 *a, u32 an, const char *lit) {
	u32 i = 0;
	for (; i < an; i++)
		if (!lit[i] || lit[i] != (char)a[i]) return 0;
	return lit[i] == 0;
}

/* ---- values ---- */

/* duration parses a Go duration (time.ParseDuration, exactly) that must
 * not be negative, in nanoseconds. */
static NOINLINE int duration(const u8 *s, u32 n, i64 *out) {
	u32 i = 0;
	int neg = 0;
	u64 d = 0;
	if (n > 0 && (s[0] == '-' || s[0] == '+')) { neg = s[0] == '-'; i = 1; }
	if (n - i == 1 && s[i] == '0') { *out = 0; return 1; }
	if (i == n) return 0;
	while (i < n) {
		u64 v = 0, f = 0;
		double scale = 1;
		if (!(s[i] == '.' || (s[i] >= '0' && s[i] <= '9'))) return 0;
		u32 b = i;
		for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
			if (v > (1ull << 63) / 10) return 0;
			v = v * 10 + (s[i] - '0');
			if (v > 1ull << 63) return 0;
		}
		int pre = i != b, post = 0;
		if (i < n && s[i] == '.') {
			i++;
			u32 fb = i;
			int over = 0;
			for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
				if (over) continue;
				if (f > ((1ull << 63) - 1) / 10) { over = 1; continue; }
				u64 y = f * 10 + (s[i] - '0');
				if (y > 1ull << 63) { over = 1; continue; }
				f = y;
				scale *= 10;
			}
			post = i != fb;
		}
		if (!pre && !post) return 0;
		u32 ub = i;
		while (i < n && s[i] != '.' && !(s[i] >= '0' && s[i] <= '9')) i++;
		const u8 *u = s + ub;
		u32 un = i - ub;
		u64 unit;
		if (bytes_eq(u, un, "ns")) unit = 1;
		else if (bytes_eq(u, un, "us") || bytes_eq(u, un, "\xc2\xb5s") || bytes_eq(u, un, "\xce\xbcs")) unit = 1000;
		else if (bytes_eq(u, un, "ms")) unit = 1000000;
		else if (bytes_eq(u, un, "s")) unit = 1000000000ull;
		else if (bytes_eq(u, un, "m")) unit = 60000000000ull;
		else if (bytes_eq(u, un, "h")) unit = 3600000000000ull;
		else return 0;
		if (v > (1ull << 63) / unit) return 0;
		v *= unit;
		if (f > 0) {
			v += (u64)((double)f * ((double)unit / scale));
			if (v > 1ull << 63) return 0;
		}
		d += v;
		if (d > 1ull << 63) return 0;
	}
	if (neg) { *out = -(i64)d; return d == 0; } /* a negative duration is refused */
	if (d > (1ull << 63) - 1) return 0;
	*out = (i64)d;
	return 1;
}

/* dur reads a string field holding a non-negative Go duration. */
static int dur(i64 *out, const char *msg) {
	u8 b[64];
	u32 n;
	if (!str(b, sizeof b, &n, msg)) return 0;
	if (n == 0) { *out = 0; return 1; } /* "" is the default */
	if (!duration(b, n, out)) return fail(msg);
	return 1;
}

/* factor reads a number in the exactly-convertible form both builds accept
 * (plugins/README.md): at most 15 significant digits and a decimal exponent
 * within ±22 once they are an integer, so the value is one correctly
 * rounded IEEE multiply or divide, the same double strconv.ParseFloat
 * gives. */
static NOINLINE int factor(double *out, const char *msg) {
	u32 at, len;
	int frac;
	if (!number(&at, &len, &frac)) return 0;
	const u8 *s = J.s + at;
	u32 i = 0;
	int neg = s[0] == '-';
	if (neg) i++;
	u64 m = 0;
	u32 digits = 0, zeros = 0; /* significant digits kept, trailing zeros pending */
	i64 e = 0;
	int point = 0;
	for (; i < len && s[i] != 'e' && s[i] != 'E'; i++) {
		if (s[i] == '.') { point = 1; continue; }
		u32 c = s[i] - '0';
		if (point) e--;
		if (c == 0) {
			if (digits) zeros++;
			continue;
		}
		digits += zeros + 1;
		if (digits > 15) return fail(msg);
		while (zeros) { m *= 10; zeros--; }
		m = m * 10 + c;
	}
	e += zeros;
	if (i < len) {
		i++;
		int eneg = 0;
		if (s[i] == '+' || s[i] == '-') { eneg = s[i] == '-'; i++; }
		i64 x = 0;
		for (; i < len; i++) {
			if (x < 1000000) x = x * 10 + (s[i] - '0');
		}
		e += eneg ? -x : x;
	}
	double v = (double)m;
	if (m != 0) {
		if (e > 22 || e < -22) return fail(msg);
		static const double p10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
		                             1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
		v = e >= 0 ? v * p10[e] : v / p10[-e];
	}
	*out = neg ? -v : v;
	return 1;
}

#endif
