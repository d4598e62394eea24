/* Reading event traces (nereus-events(5)).  Each line goes through the one
 * JSON loader; its messages say line 1 of a one-line document, so they are
 * moved to the line's place in the file before they leave. */
#include "run/events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

const char *const events_kind_names[NEV_KINDS + 1] = { "down", "up", "response", "headroom",
					      "straggler", NULL };

/* "FILE:1:COL: ..." → "FILE:LINE:COL: ..." */
static int relocate(struct err *e, const char *shown, long line)
{
	char head[600], out[sizeof e->msg];
	size_t h, k, r;

	snprintf(head, sizeof head, "%s:1:", shown);
	h = strlen(head);
	if (strncmp(e->msg, head, h) != 0)
		return e->code;
	snprintf(out, sizeof out, "%s:%ld:", shown, line);
	k = strlen(out);
	r = strlen(e->msg + h);
	if (k + r >= sizeof out)
		r = sizeof out - 1 - k;
	memcpy(out + k, e->msg + h, r);
	out[k + r] = '\0';
	memcpy(e->msg, out, k + r + 1);
	return e->code;
}

/* The GPUs named by "nodes" and "gpus", expanded to global ids. */
static int load_gpus(const struct jdoc *d, json_t *root, const struct cluster *cl,
		     struct event *ev, struct err *e)
{
	int total = cluster_gpus(cl), gpn = cl->gpus_per_node;
	json_t *arr[2], *v;
	size_t i, n = 0;
	int rc;

	if ((rc = jget_arr(d, root, "", "nodes", false, &arr[0], e)) ||
	    (rc = jget_arr(d, root, "", "gpus", false, &arr[1], e)))
		return rc;
	for (int w = 0; w < 2; w++)
		n += arr[w] ? json_array_size(arr[w]) * (w ? 1 : (size_t)gpn) : 0;
	if (n == 0)
		return jdoc_fail(d, "", e, "a \"%s\" event names GPUs: give \"nodes\" or \"gpus\" "
				 "(a non-empty array of ids)", events_kind_names[ev->kind]);
	ev->gpus = malloc(n * sizeof *ev->gpus);
	if (!ev->gpus)
		return err_oom(e);
	for (int w = 0; w < 2; w++) {
		const char *key = w ? "gpus" : "nodes";
		long limit = w ? total : cl->nodes;
		if (!arr[w])
			continue;
		json_array_foreach(arr[w], i, v) {
			long id = json_is_integer(v) ? (long)json_integer_value(v) : -1;
			char p[64];
			if (id < 0 || id >= limit) {
				snprintf(p, sizeof p, "%s[%zu]", key, i);
				return jdoc_fail(d, p, e, "expected a %s id from 0 to %ld (cluster "
						 "'%s')", w ? "GPU" : "node", limit - 1, cl->name);
			}
			if (w)
				ev->gpus[ev->ngpus++] = (int)id;
			else
				for (int k = 0; k < gpn; k++)
					ev->gpus[ev->ngpus++] = (int)id * gpn + k;
		}
	}
	return NR_OK;
}

static int load_event(const struct jdoc *d, const struct cluster *cl, long prev,
		      struct event *ev, struct err *e)
{
	static const char *const keys[NEV_KINDS][9] = {
		[EV_DOWN] = { "nereus", "kind", "step", "note", "nodes", "gpus", NULL },
		[EV_UP] = { "nereus", "kind", "step", "note", "nodes", "gpus", NULL },
		[EV_RESPONSE] = { "nereus", "kind", "step", "note", "mean", "p90", "max", NULL },
		[EV_HEADROOM] = { "nereus", "kind", "step", "note", "headroom", NULL },
		[EV_STRAGGLER] = { "nereus", "kind", "step", "note", "nodes", "gpus", "factor",
				   NULL },
	};
	const char *kind = jdoc_kind(d);
	char note[256];
	int k, rc;

	for (k = 0; k < NEV_KINDS; k++)
		if (strcmp(kind, events_kind_names[k]) == 0)
			break;
	if (k == NEV_KINDS)
		return jdoc_fail(d, "kind", e, "unknown event kind \"%s\" (expected down, up, "
				 "response, headroom or straggler)", kind);
	ev->kind = (enum ev_kind)k;
	if ((rc = jdoc_check_keys(d, d->root, "", keys[k], e)) ||
	    (rc = jget_str(d, d->root, "", "note", false, note, sizeof note, e)) ||
	    (rc = jget_int(d, d->root, "", "step", true, 0, (1L << 40), &ev->step, e)))
		return rc;
	if (ev->step < prev)
		return jdoc_fail(d, "step", e, "events must be in step order: step %ld comes "
				 "after step %ld", ev->step, prev);
	switch (ev->kind) {
	case EV_DOWN:
	case EV_UP:
		return load_gpus(d, d->root, cl, ev, e);
	case EV_RESPONSE:
		if ((rc = jget_int(d, d->root, "", "max", true, 1, 1 << 22, &ev->resp.max, e)) ||
		    (rc = jget_num(d, d->root, "", "mean", true, 1, (double)ev->resp.max,
				   &ev->resp.mean, e)) ||
		    (rc = jget_num(d, d->root, "", "p90", true, ev->resp.mean,
				   (double)ev->resp.max, &ev->resp.p90, e)))
			return rc;
		return NR_OK;
	case EV_HEADROOM:
		return jget_num(d, d->root, "", "headroom", true, 0, 0.5, &ev->headroom, e);
	case EV_STRAGGLER:
		if ((rc = jget_num(d, d->root, "", "factor", true, 1, 1000, &ev->factor, e)))
			return rc;
		return load_gpus(d, d->root, cl, ev, e);
	default:
		return NR_OK;
	}
}

int events_load(struct events *ev, const char *file, const struct cluster *cl, long steps,
		struct err *e)
{
	struct lines in;
	char *line;
	size_t n, cap = 0;
	long prev = 0;
	int rc;

	memset(ev, 0, sizeof *ev);
	if ((rc = in_lines_open(&in, file, e)))
		return rc;
	while ((rc = in_lines_next(&in, &line, &n, NULL, e)) == NR_OK && line) {
		struct jdoc d;
		struct event *x;

		if (strspn(line, " \t\r") >= n)
			continue; /* blank lines separate nothing but are allowed */
		if (ev->n == cap) {
			struct event *nv = realloc(ev->v, (cap = cap ? 2 * cap : 64) * sizeof *nv);
			if (!nv) {
				rc = err_oom(e);
				break;
			}
			ev->v = nv;
		}
		x = &ev->v[ev->n];
		memset(x, 0, sizeof *x);
		x->line = in.lineno;
		if ((rc = jdoc_loadb(&d, file, line, n, NULL, e))) {
			int cut = jdoc_line_cut(line, n);
			if (cut)
				err_set(e, NR_EINPUT, "%s:%ld:%d: expected one JSON object per line "
					"(JSON Lines), and this line ends inside one", in.name,
					in.lineno, cut);
			else
				relocate(e, in.name, in.lineno);
			break;
		}
		ev->n++; /* counted now so events_free releases its GPU list */
		rc = load_event(&d, cl, prev, x, e);
		jdoc_free(&d);
		if (rc) {
			relocate(e, in.name, in.lineno);
			break;
		}
		prev = x->step;
		if (x->step >= steps) {
			if (ev->past++ == 0)
				ev->past_line = in.lineno;
			free(x->gpus);
			ev->n--;
		}
	}
	in_lines_close(&in);
	if (rc)
		events_free(ev);
	return rc;
}

void events_free(struct events *ev)
{
	for (size_t i = 0; i < ev->n; i++)
		free(ev->v[i].gpus);
	free(ev->v);
	memset(ev, 0, sizeof *ev);
}
