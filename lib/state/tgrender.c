/* The transition graph for programs and people: the transition document
 * (nereus-transition(5)), a text summary, and an SVG of rounds × GPUs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/text.h"
#include "state/tgraph.h"

/* Times to the microsecond, sizes to the MiB, as the plan document does. */
static double secs(double s)
{
	return round(s * 1e6) / 1e6;
}

static double gib(double bytes)
{
	return round(bytes / GIB * 1000) / 1000;
}

static int plan_gpus(const struct plan *p)
{
	int n = 0;

	for (int i = 0; i < p->npools; i++)
		n += p->pools[i].ngpus;
	return n;
}

static const char *where(const struct emu *u)
{
	return u->item == ITEM_GEN ? "generation" : "home";
}

static int64_t peak_of(const struct tgraph *g)
{
	int64_t most = 0;

	for (int gpu = 0; gpu < g->ngpus; gpu++)
		if (g->peak[gpu] > most)
			most = g->peak[gpu];
	return most;
}

static int64_t moved_of(const struct tgraph *g)
{
	int64_t b = 0;

	for (int k = 0; k < TG_NLINKS; k++)
		b += g->link_bytes[k];
	return b;
}

static json_t *ints(const int64_t *a, int n)
{
	json_t *arr = json_array();

	for (int i = 0; i < n; i++)
		json_array_append_new(arr, json_integer(a[i]));
	return arr;
}

static json_t *edge_json(const struct env *v, const struct tgraph *g, const struct tg_edge *ed)
{
	const struct tg_list *sl = ed->src_list >= 0 ? &g->lists[ed->src_list] : NULL;
	const struct tg_list *dl = ed->dst_list >= 0 ? &g->lists[ed->dst_list] : NULL;
	const struct tg_list *pl = ed->staging ? sl : dl; /* whose pieces first and count count */
	const struct layout *lo = &pl->u->lo;
	int last = ed->first + ed->count - 1;
	json_t *o = json_object();
	char mask[24];

	json_object_set_new(o, "model", json_string(v->job->models[ed->model].name));
	json_object_set_new(o, "kind", json_string(state_kind_names[ed->kind]));
	json_object_set_new(o, "link", json_string(tg_link_names[ed->link]));
	json_object_set_new(o, "bytes", json_integer(ed->bytes));
	json_object_set_new(o, "src", ed->src >= 0 ? json_integer(ed->src) : json_null());
	json_object_set_new(o, "dst", json_integer(ed->dst));
	json_object_set_new(o, "src_layout", sl ? json_string(where(sl->u)) : json_null());
	json_object_set_new(o, "dst_layout", dl ? json_string(where(dl->u)) : json_null());
	if (ed->src_host)
		json_object_set_new(o, "src_host", json_true());
	if (ed->dst_host)
		json_object_set_new(o, "dst_host", json_true());
	json_object_set_new(o, "first", json_integer(ed->first));
	json_object_set_new(o, "count", json_integer(ed->count));
	if (ed->whole && !ed->staging) {
		snprintf(mask, sizeof mask, "0x%llx", (unsigned long long)ed->mask);
		json_object_set_new(o, "mask", json_string(mask));
		while (last > ed->first && !(ed->mask >> (last - ed->first) & 1))
			last--;
	}
	json_object_set_new(o, "tensor",
			    json_string(lo->tensors[pl->l->pieces[ed->first].tensor].name));
	if (last > ed->first)
		json_object_set_new(o, "last_tensor",
				    json_string(lo->tensors[pl->l->pieces[last].tensor].name));
	if (!ed->whole)
		json_object_set_new(o, "box", json_pack("{s:o,s:o}", "offset",
						       ints(ed->box.off, ed->box.ndim), "extent",
						       ints(ed->box.ext, ed->box.ndim)));
	if (ed->staging)
		json_object_set_new(o, "staging", json_true());
	if (ed->staged)
		json_object_set_new(o, "staged", json_true());
	if (ed->rseg >= 0)
		json_object_set_new(o, "relay", json_true());
	return o;
}

json_t *tgraph_to_json(const struct env *v, const struct plan *a, const struct plan *b,
		       const struct tgraph *g, bool with_edges)
{
	json_t *doc = json_object(), *links = json_object(), *rounds = json_array();
	json_t *stages = json_array();

	json_object_set_new(doc, "nereus", json_integer(NR_FORMAT));
	json_object_set_new(doc, "kind", json_string("transition"));
	json_object_set_new(doc, "job", json_string(v->job->name));
	json_object_set_new(doc, "cluster", json_string(v->cl->name));
	json_object_set_new(doc, "from", json_pack("{s:s,s:i}", "layout", a->layout, "gpus",
						   plan_gpus(a)));
	json_object_set_new(doc, "to", json_pack("{s:s,s:i}", "layout", b->layout, "gpus",
						 plan_gpus(b)));
	json_object_set_new(doc, "gpus_lost", json_integer(g->gpus_lost));
	json_object_set_new(doc, "predicted_s", json_real(secs(g->predicted_s)));
	json_object_set_new(doc, "lower_bound_s", json_real(secs(g->lower_bound_s)));
	json_object_set_new(doc, "moved_gib", json_real(gib((double)moved_of(g))));
	json_object_set_new(doc, "kept_gib", json_real(gib((double)g->kept_bytes)));
	json_object_set_new(doc, "capacity_gib", json_real(gib(g->capacity)));
	json_object_set_new(doc, "peak_gib", json_real(gib((double)peak_of(g))));
	json_object_set_new(doc, "quantum_s", json_real(secs(g->quantum_s)));
	json_object_set_new(doc, "edge_count", json_integer(g->nedges));
	for (int k = 0; k < TG_NLINKS; k++)
		json_object_set_new(links, tg_link_names[k],
				    json_pack("{s:i,s:f,s:f}", "edges", g->link_edges[k], "gib",
					      gib((double)g->link_bytes[k]), "seconds",
					      secs(g->link_seconds[k])));
	json_object_set_new(doc, "links", links);
	for (int r = 0; r < g->nrounds; r++) {
		const struct tg_round *rd = &g->rounds[r];

		json_array_append_new(rounds, json_pack("{s:f,s:i,s:f,s:b}", "time_s",
							secs(rd->seconds), "transfers",
							rd->transfers, "gib", gib((double)rd->bytes),
							"staging", rd->staging));
	}
	json_object_set_new(doc, "rounds", rounds);
	for (int i = 0; i < g->nstages; i++) {
		const struct tg_edge *ed = &g->edges[g->stages[i].edge];

		json_array_append_new(stages, json_pack("{s:i,s:s,s:s,s:f,s:i}", "gpu", ed->src,
							"model", v->job->models[ed->model].name,
							"kind", state_kind_names[ed->kind], "gib",
							gib((double)ed->bytes), "round",
							g->stages[i].round));
	}
	json_object_set_new(doc, "staging", stages);
	if (with_edges) {
		json_t *edges = json_array();

		for (int e = 0; e < g->nedges; e++)
			json_array_append_new(edges, edge_json(v, g, &g->edges[e]));
		json_object_set_new(doc, "edges", edges);
	}
	return doc;
}

/* --- text ----------------------------------------------------------------- */

char *tgraph_table(const struct env *v, const struct plan *a, const struct plan *b,
		   const struct tgraph *g)
{
	struct sbuf t = { 0 };
	struct table links;

	sb_printf(&t, "transition: job %s on %s, plan %s (%d GPUs) -> %s (%d GPUs)\n",
		  v->job->name, v->cl->name, a->layout, plan_gpus(a), b->layout, plan_gpus(b));
	table_init(&links, 4, "lrrr");
	table_cell(&links, "link");
	table_cell(&links, "edges");
	table_cell(&links, "GiB");
	table_cell(&links, "link-s");
	for (int k = 0; k < TG_NLINKS; k++) {
		table_cell(&links, "%s", tg_link_names[k]);
		table_cell(&links, "%d", g->link_edges[k]);
		table_cell(&links, "%.3f", g->link_bytes[k] / GIB);
		table_cell(&links, "%.6f", g->link_seconds[k]);
	}
	table_put(&links, &t);
	table_free(&links);
	sb_printf(&t, "moved %.3f GiB, kept in place %.3f GiB, GPUs lost %d, staged segments %d\n",
		  moved_of(g) / GIB, g->kept_bytes / GIB, g->gpus_lost, g->nstages);
	sb_printf(&t, "memory: peak %.3f GiB of %.3f GiB per GPU\n", peak_of(g) / GIB,
		  g->capacity / GIB);
	sb_printf(&t, "rounds %d (quantum %.6f s): predicted %.6f s, lower bound %.6f s",
		  g->nrounds, g->quantum_s, g->predicted_s, g->lower_bound_s);
	if (g->lower_bound_s > 0)
		sb_printf(&t, " (%.3fx)", g->predicted_s / g->lower_bound_s);
	sb_printf(&t, "\n");
	return sb_take(&t);
}

/* --- SVG ------------------------------------------------------------------ */

#define SVG_W 960          /* plot width */
#define SVG_H 640          /* plot height at most */
#define SVG_LEFT 70
#define SVG_TOP 40
#define STAGING TG_NLINKS  /* a colour for GPUs sending to host memory when staging */

static const char *const colours[TG_NLINKS + 1] = {
	"#9e9e9e", "#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2",
};

/* Close GPU gpu's run of one colour at x. */
static void close_run(struct sbuf *t, int gpu, int colour, double x0, double x, double row)
{
	if (colour >= 0 && x > x0)
		sb_printf(t, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
			  "fill=\"%s\"/>\n", SVG_LEFT + x0, SVG_TOP + gpu * row, x - x0, row,
			  colours[colour]);
}

int tgraph_svg(const struct env *v, const struct tgraph *g, const char *file, struct err *e)
{
	struct sbuf t = { 0 };
	int n = g->ngpus, *run = malloc((size_t)n * sizeof *run);
	int *now = malloc((size_t)n * sizeof *now);
	double *start = malloc((size_t)n * sizeof *start);
	double row = fmin(8, (double)SVG_H / n), x = 0, scale;
	char *text;
	int rc;
	static const char *const legend[TG_NLINKS + 1] = { "local", "intra", "host", "inter",
							    "store", "staging" };

	if (!run || !now || !start) {
		free(run);
		free(now);
		free(start);
		return err_oom(e);
	}
	scale = g->predicted_s > 0 ? SVG_W / g->predicted_s : 0;
	sb_printf(&t, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" "
		  "font-family=\"sans-serif\" font-size=\"12\">\n", SVG_LEFT + SVG_W + 20,
		  SVG_TOP + n * row + 60);
	sb_printf(&t, "<text x=\"%d\" y=\"20\">transition of ", SVG_LEFT);
	sb_xml(&t, v->job->name);
	sb_printf(&t, " on ");
	sb_xml(&t, v->cl->name);
	sb_printf(&t, ": %d rounds, predicted %.4f s, lower bound %.4f s (each GPU coloured by "
		  "the link it receives on)</text>\n", g->nrounds, g->predicted_s,
		  g->lower_bound_s);
	sb_printf(&t, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%.2f\" fill=\"none\" "
		  "stroke=\"#000\"/>\n", SVG_LEFT, SVG_TOP, SVG_W, n * row);
	for (int gpu = 0; gpu < n; gpu++)
		run[gpu] = -1;
	for (int r = 0; r < g->nrounds; r++) {
		const struct tg_round *rd = &g->rounds[r];
		double x1 = x + rd->seconds * scale;

		for (int gpu = 0; gpu < n; gpu++)
			now[gpu] = -1;
		for (int m = rd->move0; m < rd->move0 + rd->nmoves; m++) {
			const struct tg_edge *ed = &g->edges[g->moves[m].edge];

			if (ed->staging)
				now[ed->src] = STAGING;
			else
				now[ed->dst] = ed->link;
		}
		for (int gpu = 0; gpu < n; gpu++)
			if (now[gpu] != run[gpu]) {
				close_run(&t, gpu, run[gpu], start[gpu], x, row);
				run[gpu] = now[gpu];
				start[gpu] = x;
			}
		x = x1;
	}
	for (int gpu = 0; gpu < n; gpu++)
		close_run(&t, gpu, run[gpu], start[gpu], x, row);
	for (int k = 0; k <= 4; k++)
		sb_printf(&t, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.4g s</text>\n",
			  SVG_LEFT + SVG_W * k / 4.0, SVG_TOP + n * row + 16, g->predicted_s * k / 4);
	sb_printf(&t, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">GPU 0</text>\n", SVG_LEFT - 6,
		  SVG_TOP + 10);
	sb_printf(&t, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">GPU %d</text>\n", SVG_LEFT - 6,
		  SVG_TOP + n * row, n - 1);
	for (int k = 0; k <= TG_NLINKS; k++) {
		sb_printf(&t, "<rect x=\"%d\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n",
			  SVG_LEFT + 110 * k, SVG_TOP + n * row + 30, colours[k]);
		sb_printf(&t, "<text x=\"%d\" y=\"%.1f\">%s</text>\n", SVG_LEFT + 110 * k + 16,
			  SVG_TOP + n * row + 41, legend[k]);
	}
	sb_printf(&t, "</svg>\n");
	free(run);
	free(now);
	free(start);
	if (!(text = sb_take(&t)))
		return err_oom(e);
	rc = out_write_file_atomic(file, text, strlen(text), e);
	free(text);
	return rc;
}
