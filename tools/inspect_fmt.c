/*
 * `tokenbox inspect` output helpers (tools/inspect.h): aligned tables that
 * fit 80 columns, ages and times, durations, and bytes shown as text when
 * they are UTF-8 text, else as hex (human) or base64 (JSON).
 *
 * Everything printed comes from files that anybody may have written, so
 * text is cleaned before it reaches a terminal (no control characters) or
 * a JSON document (valid UTF-8 only).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/cli.h"
#include "tools/inspect.h"

/*
 * UTF-8.
 */

/* Length of the valid UTF-8 sequence at @p s (at most @p n bytes), or 0
 * when it is not one (overlong forms and surrogates included). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4, cp = c & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

int insp_is_text(const void *p, size_t len)
{
	const unsigned char *s = p;

	for (size_t i = 0; i < len;) {
		size_t n = utf8_seq(s + i, len - i);
		if (n == 0)
			return 0;
		if (n == 1 && ((s[i] < 0x20 && s[i] != '\t' && s[i] != '\n' &&
				s[i] != '\r') ||
			       s[i] == 0x7f))
			return 0;
		i += n;
	}
	return 1;
}

/* Cleans @p len bytes into a new string; @p keep_controls keeps tab,
 * newline and carriage return (JSON escapes them). */
static char *clean_n(const char *s, size_t len, int keep_controls)
{
	char *out = malloc(len + 1);
	size_t o = 0;

	if (!out)
		return NULL;
	for (size_t i = 0; i < len;) {
		const unsigned char *u = (const unsigned char *)s + i;
		size_t n = utf8_seq(u, len - i);

		if (n == 0) {
			out[o++] = '?';
			i++;
			continue;
		}
		if (n == 1 && (u[0] < 0x20 || u[0] == 0x7f) &&
		    !(keep_controls &&
		      (u[0] == '\t' || u[0] == '\n' || u[0] == '\r'))) {
			out[o++] = '?';
			i++;
			continue;
		}
		memcpy(out + o, u, n);
		o += n;
		i += n;
	}
	out[o] = '\0';
	return out;
}

char *insp_clean(const char *s)
{
	char *out = clean_n(s ? s : "", s ? strlen(s) : 0, 0);

	return out ? out : calloc(1, 1);
}

/* Display width: one column per code point (the names and ids tokenbox
 * stores are ASCII; others are at least not cut in the middle). */
static size_t text_width(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		w += ((unsigned char)*s & 0xc0) != 0x80;
	return w;
}

/* Display width of the first @p n bytes of @p s. */
static size_t text_width_n(const char *s, size_t n)
{
	size_t w = 0;

	for (size_t i = 0; i < n && s[i]; i++)
		w += ((unsigned char)s[i] & 0xc0) != 0x80;
	return w;
}

/* Bytes of the first @p cols code points of @p s. */
static size_t text_prefix(const char *s, size_t cols)
{
	size_t i = 0, w = 0;

	for (; s[i]; i++) {
		if (((unsigned char)s[i] & 0xc0) != 0x80) {
			if (w == cols)
				break;
			w++;
		}
	}
	return i;
}

/*
 * Tables.
 */

#define TBL_MAX_COLS 16
#define TBL_GAP	     2
/* A shrinkable column keeps at least this many columns. */
#define TBL_MIN_SHRUNK 8

struct insp_tbl {
	size_t ncol;
	char spec[TBL_MAX_COLS + 1];
	char **cells; /* heads, then rows, row-major */
	size_t cnt, cap;
	int oom;
};

insp_tbl_t *insp_tbl_new(const char *spec, const char *const *heads)
{
	insp_tbl_t *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->ncol = strlen(spec);
	if (t->ncol == 0 || t->ncol > TBL_MAX_COLS) {
		free(t);
		return NULL;
	}
	memcpy(t->spec, spec, t->ncol + 1);
	for (size_t i = 0; i < t->ncol; i++)
		insp_tbl_cell(t, heads[i]);
	return t;
}

void insp_tbl_cell(insp_tbl_t *t, const char *text)
{
	char *c;

	if (!t)
		return;
	if (t->cnt == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		char **grown = realloc(t->cells, cap * sizeof(*grown));
		if (!grown) {
			t->oom = 1;
			return;
		}
		t->cells = grown;
		t->cap = cap;
	}
	if (!(c = insp_clean(text)))
		t->oom = 1;
	t->cells[t->cnt++] = c;
}

void insp_tbl_cellf(insp_tbl_t *t, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	insp_tbl_cell(t, buf);
}

void insp_tbl_print(insp_tbl_t *t, int indent)
{
	size_t w[TBL_MAX_COLS], minw[TBL_MAX_COLS], total;
	size_t rows;

	if (!t || t->oom)
		return;
	rows = t->cnt / t->ncol;
	total = (size_t)indent + TBL_GAP * (t->ncol - 1);
	for (size_t c = 0; c < t->ncol; c++) {
		w[c] = 0;
		for (size_t r = 0; r < rows; r++) {
			size_t cw = text_width(t->cells[r * t->ncol + c]);
			if (cw > w[c])
				w[c] = cw;
		}
		minw[c] = text_width(t->cells[c]);
		if (minw[c] < TBL_MIN_SHRUNK)
			minw[c] = TBL_MIN_SHRUNK;
		if (minw[c] > w[c])
			minw[c] = w[c];
		total += w[c];
	}
	/* Too wide: take a column at a time from the widest shrinkable
	 * column, so that long ids share the cut. */
	while (total > INSPECT_WIDTH) {
		size_t best = TBL_MAX_COLS;
		for (size_t c = 0; c < t->ncol; c++)
			if ((t->spec[c] == 'L' || t->spec[c] == 'R') &&
			    w[c] > minw[c] &&
			    (best == TBL_MAX_COLS || w[c] > w[best]))
				best = c;
		if (best == TBL_MAX_COLS)
			break;
		w[best]--;
		total--;
	}
	for (size_t r = 0; r < rows; r++) {
		printf("%*s", indent, "");
		for (size_t c = 0; c < t->ncol; c++) {
			const char *s = t->cells[r * t->ncol + c];
			size_t sw = text_width(s), len = strlen(s), pad;
			int right = t->spec[c] == 'r' || t->spec[c] == 'R';
			int cut = sw > w[c];

			if (cut) {
				len = text_prefix(s, w[c] - 1);
				sw = w[c];
			}
			pad = w[c] - sw;
			if (right)
				printf("%*s", (int)pad, "");
			printf("%.*s%s", (int)len, s, cut ? "…" : "");
			if (c + 1 < t->ncol)
				printf("%*s", (int)(right ? 0 : pad) + TBL_GAP,
				       "");
		}
		printf("\n");
	}
}

void insp_tbl_free(insp_tbl_t *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->cnt; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

/*
 * Times and durations.
 */

void insp_fmt_age(int64_t ms, char *buf, size_t size)
{
	long long s = ms > 0 ? ms / 1000 : 0;

	if (s < 60)
		snprintf(buf, size, "%llds", s);
	else if (s < 3600)
		snprintf(buf, size, "%lldm%02llds", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, size, "%lldh%02lldm", s / 3600, s % 3600 / 60);
	else
		snprintf(buf, size, "%lldd%02lldh", s / 86400,
			 s % 86400 / 3600);
}

int64_t insp_age(const insp_t *in, int64_t then_ms)
{
	int64_t age;

	if (__builtin_sub_overflow(in->now_ms, then_ms, &age))
		return then_ms < 0 ? INT64_MAX : INT64_MIN;
	return age;
}

void insp_fmt_time(int64_t ms, char *buf, size_t size)
{
	time_t sec = (time_t)(ms / 1000);
	struct tm tm;

	if (ms <= 0 || !gmtime_r(&sec, &tm)) {
		snprintf(buf, size, "-");
		return;
	}
	snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
		 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		 tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

static const struct unit {
	const char *name;
	int64_t ms;
} units[] = {
    {"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1},
};

int insp_parse_duration(const char *opt, const char *arg, int64_t *ms)
{
	const char *p = arg;
	int64_t v = 0;

	while (*p >= '0' && *p <= '9') {
		if (v > (INT64_MAX - (*p - '0')) / 10)
			return tbx_cli_usage(INSPECT_CMD,
					     "%s: '%s' is too long a duration",
					     opt, arg);
		v = v * 10 + (*p++ - '0');
	}
	if (p == arg)
		goto bad;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(p, units[i].name) != 0)
			continue;
		if (v > INT64_MAX / units[i].ms)
			return tbx_cli_usage(INSPECT_CMD,
					     "%s: '%s' is too long a duration",
					     opt, arg);
		*ms = v * units[i].ms;
		return 0;
	}
bad:
	return tbx_cli_usage(INSPECT_CMD,
			     "%s: '%s' is not a duration (an integer and a "
			     "unit: ms, s, m, h or d; e.g. 30s, 10m)",
			     opt, arg);
}

int insp_parse_since(const char *opt, const char *arg, int64_t *abs_ms,
		     int64_t *ago_ms)
{
	int y, mo, d, h, mi, sec, n = 0, oh = 0, om = 0, sign = 0;
	int64_t frac_ms = 0, scale = 100;
	const char *p;
	struct tm tm = {0};

	*abs_ms = *ago_ms = -1;
	if (*arg >= '0' && *arg <= '9' && !strchr(arg, '-') &&
	    !strchr(arg, ':'))
		return insp_parse_duration(opt, arg, ago_ms);
	if (sscanf(arg, "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%2d%n", &y, &mo, &d, &h,
		   &mi, &sec, &n) != 6 ||
	    n != 19)
		goto bad;
	p = arg + n;
	if (*p == '.') {
		if (!(p[1] >= '0' && p[1] <= '9'))
			goto bad;
		for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10)
			frac_ms += (*p - '0') * scale;
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if ((*p == '+' || *p == '-') &&
		   sscanf(p + 1, "%2d:%2d%n", &oh, &om, &n) == 2 && n == 5) {
		sign = *p == '+' ? 1 : -1;
		p += 6;
	} else {
		goto bad;
	}
	if (*p || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
	    sec > 60 || oh > 23 || om > 59 || y < 1970)
		goto bad;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	*abs_ms = ((int64_t)timegm(&tm) - sign * (oh * 3600 + om * 60)) * 1000 +
		  frac_ms;
	return 0;
bad:
	return tbx_cli_usage(INSPECT_CMD,
			     "%s: '%s' is neither an RFC 3339 time (e.g. "
			     "2026-11-27T15:04:05Z or "
			     "2026-11-27T16:04:05+01:00) nor a duration back "
			     "from now (e.g. 30m, 1h)",
			     opt, arg);
}

void insp_fmt_duration(int64_t ms, char *buf, size_t size)
{
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (ms != 0 && ms % units[i].ms == 0) {
			snprintf(buf, size, "%" PRId64 "%s", ms / units[i].ms,
				 units[i].name);
			return;
		}
	}
	snprintf(buf, size, "0s");
}

const char *insp_count_of(char *buf, size_t size, int64_t n, const char *one,
			  const char *many)
{
	snprintf(buf, size, "%" PRId64 " %s", n, n == 1 ? one : many);
	return buf;
}

/*
 * Bytes.
 */

static char *base64(const unsigned char *p, size_t len)
{
	static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmn"
				  "opqrstuvwxyz0123456789+/";
	char *out, *o;

	if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
		return NULL;
	if (!(out = malloc((len + 2) / 3 * 4 + 1)))
		return NULL;
	o = out;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		size_t left = len - i;

		if (left > 1)
			v |= (uint32_t)p[i + 1] << 8;
		if (left > 2)
			v |= p[i + 2];
		*o++ = tbl[(v >> 18) & 63];
		*o++ = tbl[(v >> 12) & 63];
		*o++ = left > 1 ? tbl[(v >> 6) & 63] : '=';
		*o++ = left > 2 ? tbl[v & 63] : '=';
	}
	*o = '\0';
	return out;
}

cJSON *insp_bytes_json(const void *p, size_t len)
{
	cJSON *o;
	char *s;

	if (!p)
		return cJSON_CreateNull();
	if (!(o = cJSON_CreateObject()))
		return NULL;
	cJSON_AddNumberToObject(o, "bytes", (double)len);
	if (insp_is_text(p, len)) {
		s = clean_n(p, len, 1);
		cJSON_AddItemToObject(o, "text",
				      cJSON_CreateString(s ? s : ""));
	} else {
		s = base64(p, len);
		cJSON_AddItemToObject(o, "base64",
				      cJSON_CreateString(s ? s : ""));
	}
	free(s);
	return o;
}

/* Width of the label column of `show` (after the indent). */
#define LABEL_W 13
/* Single-line text up to this many bytes is shown quoted after the
 * label; anything longer goes on lines of its own. */
#define INLINE_MAX 48

static void hex_dump(const unsigned char *p, size_t len, int indent)
{
	for (size_t off = 0; off < len; off += 16) {
		size_t n = len - off < 16 ? len - off : 16;

		printf("%*s%04zx ", indent, "", off);
		for (size_t i = 0; i < 16; i++) {
			if (i == 8)
				printf(" ");
			if (i < n)
				printf(" %02x", p[off + i]);
			else
				printf("   ");
		}
		printf("  ");
		for (size_t i = 0; i < n; i++)
			putchar(p[off + i] >= 0x20 && p[off + i] < 0x7f
				    ? p[off + i]
				    : '.');
		printf("\n");
	}
}

/* Prints the label padded to @p width (at least one space after it).
 * @returns the column the value starts at. */
static size_t label_w(const char *label, int indent, size_t width)
{
	char *clean = insp_clean(label);
	size_t w = text_width(clean);
	size_t pad = w < width ? width - w : 1;

	printf("%*s%s%*s", indent, "", clean, (int)pad, "");
	free(clean);
	return (size_t)indent + w + pad;
}

/* Prints @p text from column @p col on, wrapped at spaces to fit
 * INSPECT_WIDTH, continuation lines starting at @p col. */
static void wrap_from(const char *text, size_t col)
{
	size_t start = col;
	const char *p = text;

	while (*p) {
		size_t w = strcspn(p, " ");
		if (col > start &&
		    col + 1 + text_width_n(p, w) > INSPECT_WIDTH) {
			printf("\n%*s", (int)start, "");
			col = start;
		} else if (col > start) {
			putchar(' ');
			col++;
		}
		printf("%.*s", (int)w, p);
		col += text_width_n(p, w);
		p += w;
		while (*p == ' ')
			p++;
	}
	printf("\n");
}

void insp_kv(const char *label, const char *value, int indent)
{
	char *clean = insp_clean(value);

	wrap_from(clean, label_w(label, indent, LABEL_W));
	free(clean);
}

void insp_wrap(const char *first, const char *text)
{
	printf("%s", first);
	wrap_from(text, text_width(first));
}

static const char *bytes_word(size_t n)
{
	return n == 1 ? "byte" : "bytes";
}

void insp_bytes_print(const char *label, const void *p, size_t len, int indent,
		      size_t width, const char *none)
{
	char *text;

	label_w(label, indent, width ? width : LABEL_W);
	if (!p) {
		printf("%s\n", none);
		return;
	}
	if (!insp_is_text(p, len)) {
		printf("%zu %s, not text (hex):\n", len, bytes_word(len));
		hex_dump(p, len, indent + 2);
		return;
	}
	if (!(text = clean_n(p, len, 1))) {
		printf("%zu bytes\n", len);
		return;
	}
	if (len <= INLINE_MAX && !strpbrk(text, "\n\r\t")) {
		printf("\"%s\" (%zu %s)\n", text, len, bytes_word(len));
	} else {
		printf("%zu %s of text:\n", len, bytes_word(len));
		for (char *line = text, *end; line; line = end) {
			end = strchr(line, '\n');
			if (end)
				*end++ = '\0';
			if (!end && !*line)
				break; /* a final newline */
			for (char *c = line; *c; c++)
				if (*c == '\r' || *c == '\t')
					*c = ' ';
			printf("%*s%s\n", indent + 2, "", line);
		}
	}
	free(text);
}

/*
 * JSON.
 */

cJSON *insp_json_str(const char *s)
{
	char *c;
	cJSON *j;

	if (!s)
		return cJSON_CreateNull();
	if (!(c = clean_n(s, strlen(s), 1)))
		return NULL;
	j = cJSON_CreateString(c);
	free(c);
	return j;
}

void insp_json_add_str(cJSON *obj, const char *key, const char *s)
{
	cJSON_AddItemToObject(obj, key, insp_json_str(s));
}

void insp_json_add_int(cJSON *obj, const char *key, int64_t v)
{
	/* Exact up to 2^53, which covers ms timestamps and counts. */
	cJSON_AddNumberToObject(obj, key, (double)v);
}

/* Adds the fields of @p spec ("key:type …", see insp_jobj) from @p ap. */
static void jadd(cJSON *obj, const char *spec, va_list ap)
{
	char key[64];

	while (*spec) {
		size_t n = strcspn(spec, ":");
		const char *s;
		cJSON *item;

		if (!spec[n] || n >= sizeof(key))
			break; /* a malformed spec: a bug, nothing added */
		memcpy(key, spec, n);
		key[n] = '\0';
		switch (spec[n + 1]) {
		case 's':
			insp_json_add_str(obj, key, va_arg(ap, const char *));
			break;
		case 'o':
			s = va_arg(ap, const char *);
			insp_json_add_str(obj, key, s && *s ? s : NULL);
			break;
		case 'i':
			insp_json_add_int(obj, key, va_arg(ap, int64_t));
			break;
		case 'b':
			cJSON_AddBoolToObject(obj, key, va_arg(ap, int));
			break;
		case 'j':
			item = va_arg(ap, cJSON *);
			cJSON_AddItemToObject(obj, key,
					      item ? item : cJSON_CreateNull());
			break;
		default:
			return;
		}
		spec += n + 2;
		while (*spec == ' ')
			spec++;
	}
}

cJSON *insp_jobj(cJSON *into, const char *spec, ...)
{
	cJSON *obj = cJSON_CreateObject();
	va_list ap;

	if (!obj)
		return NULL;
	va_start(ap, spec);
	jadd(obj, spec, ap);
	va_end(ap);
	if (into && cJSON_IsArray(into))
		cJSON_AddItemToArray(into, obj);
	return obj;
}

void insp_jadd(cJSON *obj, const char *spec, ...)
{
	va_list ap;

	if (!obj)
		return;
	va_start(ap, spec);
	jadd(obj, spec, ap);
	va_end(ap);
}

int insp_json_print(cJSON *doc, int rc)
{
	char *text = doc ? cJSON_Print(doc) : NULL;

	cJSON_Delete(doc);
	if (!text)
		return tbx_cli_usage(INSPECT_CMD, "out of memory");
	printf("%s\n", text);
	cJSON_free(text);
	return rc;
}

int insp_list_finish(insp_t *in, cJSON **doc, insp_tbl_t *tbl, int64_t total,
		     int64_t shown, const char *noun, const char *idle)
{
	int rc = in->o->check && shown ? INSPECT_EXIT_FINDING : INSPECT_EXIT_OK;

	if (*doc) {
		insp_json_add_int(*doc, "total", total);
		insp_json_add_int(*doc, "shown", shown);
		rc = insp_json_print(*doc, rc);
		*doc = NULL;
	} else if (!shown) {
		printf("no %s%s\n", noun,
		       total || in->o->older_ms >= 0 || in->o->group_cnt
			   ? " match"
			   : idle);
	} else {
		insp_tbl_print(tbl, 0);
		if (total > shown)
			printf("… %" PRId64 " more (--limit)\n", total - shown);
	}
	return rc;
}

size_t insp_hdr_shown(const tbx_header_t *h, tbx_header_t out[2],
		      insp_hdr_text_t *text)
{
	tbx__stored_ctx_t sc;

	if (strcmp(h->name, TBX_STORED_CTX_HDR) != 0 ||
	    tbx__stored_ctx_decode(h->value, h->len, &sc) != 0) {
		out[0] = *h; /* a malformed one is shown as its bytes */
		return 1;
	}
	tbx__traceparent_format(&sc.ctx, text->tp);
	out[0] = (tbx_header_t){"traceparent", text->tp, TBX_TRACEPARENT_LEN};
	if (!sc.has_writer)
		return 1;
	if (tbx__id_is_zero(sc.writer, TBX_SPAN_ID_SIZE))
		text->writer[0] = '\0';
	else
		tbx__hex(sc.writer, TBX_SPAN_ID_SIZE, text->writer);
	out[1] = (tbx_header_t){"tbx-trace-parent", text->writer,
				strlen(text->writer)};
	return 2;
}

void insp_hdrs_print(const void *hdrs, size_t len)
{
	tbx_header_t h;
	/* Header values line up with the other values, or after the
	 * longest name. */
	size_t pos = 0, cnt = 0, width = 11;
	char buf[32];
	int r;

	while (tbx__hdrs_next(hdrs, len, &pos, &h) == 1) {
		tbx_header_t sh[2];
		insp_hdr_text_t text;
		size_t k = insp_hdr_shown(&h, sh, &text);
		for (size_t x = 0; x < k; x++) {
			cnt++;
			if (strlen(sh[x].name) + 2 > width)
				width = strlen(sh[x].name) + 2;
		}
	}
	snprintf(buf, sizeof(buf), "%zu", cnt);
	insp_kv("headers", buf, 4);
	pos = 0;
	while ((r = tbx__hdrs_next(hdrs, len, &pos, &h)) == 1) {
		tbx_header_t sh[2];
		insp_hdr_text_t text;
		size_t k = insp_hdr_shown(&h, sh, &text);
		for (size_t x = 0; x < k; x++)
			insp_bytes_print(sh[x].name, sh[x].value, sh[x].len, 6,
					 width, "(null)");
	}
	if (r < 0)
		insp_bytes_print("(malformed)", hdrs, len, 6, width, "");
}

void insp_hdrs_json(cJSON *jm, const void *hdrs, size_t len)
{
	cJSON *hs = cJSON_AddArrayToObject(jm, "headers");
	tbx_header_t h;
	size_t pos = 0;
	int r;

	while ((r = tbx__hdrs_next(hdrs, len, &pos, &h)) == 1) {
		tbx_header_t sh[2];
		insp_hdr_text_t text;
		size_t k = insp_hdr_shown(&h, sh, &text);
		for (size_t x = 0; x < k; x++)
			insp_jobj(hs, "name:s value:j", sh[x].name,
				  insp_bytes_json(sh[x].value, sh[x].len));
	}
	if (r < 0)
		cJSON_AddItemToObject(jm, "headers_malformed",
				      insp_bytes_json(hdrs, len));
}
