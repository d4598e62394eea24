/* mpi_probe: lib/mpi's process groups and live moves of the engine's
 * state, driven by tests/43-engine-groups.bats and 44-engine-live-move.bats.
 *
 *     mpirun -np N mpi_probe groups JOB CLUSTER PLAN...
 *
 * Builds the groups of the first plan, then rebuilds them for each next
 * one; in every group of every plan each member sums and maxes buffers of
 * several lengths (contributions of mixed magnitudes and signs, a pure
 * function of world rank and element) and checks each element against
 * the sum taken in group rank order in double, rounded once, bit for bit;
 * sends to the next member while the previous one sends to it (two
 * messages of 256 KiB, then the other way round) and checks what came;
 * and, for the first plan, sums over the world a buffer longer than one
 * block of the reduction.
 * Rank 0 prints one JSON line per plan: checks, failures, elements whose
 * float sum in reverse member order differs (the order matters), and an
 * XXH3 digest of every result on every rank.
 *
 *     mpi_probe mkstore JOB SEED OUT [f32-norms]
 *
 * One process, no MPI: a store of the job's models laid out TP1·PP1·DP1,
 * every element of every kind a function of (seed, model, kind, tensor,
 * global index) (weights rounded to their dtype; with f32-norms the
 * RMSNorm weights kept in F32 beside the others), for nereus-transition
 * apply to lay out as each plan.
 *
 *     mpirun -np N mpi_probe live JOB CLUSTER STORE PLAN [PLAN STORE]...
 *
 * Every rank loads its state of the first plan from STORE, then moves it
 * live to each next PLAN and compares every buffer it then holds, float
 * for float, with that plan's state loaded from the STORE beside it (the
 * file path: nereus-transition apply's output).  Rank 0 prints one JSON
 * line per move.  Errors: "mpi_probe: MESSAGE" on rank 0, exit status the
 * error's code. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "doc/costdoc.h"
#include "mpi/groups.h"
#include "mpi/live.h"
#include "mpi/mpi_impl.h"
#include "mpi/start.h"
#include "state/safetensors.h"

static int me, nranks;

static void fail(const struct err *e)
{
	if (me == 0)
		fprintf(stderr, "mpi_probe: %s\n", e->msg);
	MPI_Finalize();
	exit(e->code ? e->code : 4);
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* A uniform number in [0, 1) from a key. */
static double unit(uint64_t key)
{
	return (double)(mix(key) >> 11) * 0x1p-53;
}

struct env_docs {
	struct job job;
	struct cluster cl;
	struct coef k;
	struct env v;
};

static void load_env(struct env_docs *d, const char *job, const char *cluster)
{
	struct err e = { 0 };

	cost_coef_defaults(&d->k);
	if (job_load(&d->job, job, &e) || (cluster && cluster_load(&d->cl, cluster, &e)))
		fail(&e);
	d->v = (struct env){ &d->job, &d->cl, &d->k };
}

/* --- groups ---------------------------------------------------------------------------- */

/* Rank w's contribution to element i: sign, 24 bits and an exponent over
 * 2^-12 .. 2^11, so that sums depend on their order. */
static float contrib(int w, size_t i, uint64_t salt)
{
	uint64_t h = mix(((uint64_t)w << 40) ^ ((uint64_t)i << 4) ^ salt);
	float m = (float)(h >> 40) * 0x1p-24f;

	return (h & 1 ? -1.0f : 1.0f) * ldexpf(m, (int)((h >> 8) % 24) - 12);
}

struct tally {
	uint64_t checks, failures, order_sensitive, digest;
};

static void check_reduce(const struct comm *c, const int *members, int n, size_t len,
			 uint64_t salt, bool max, struct tally *t)
{
	float *buf = malloc(len * sizeof *buf + 1);
	struct err e = { 0 };

	for (size_t i = 0; i < len; i++)
		buf[i] = contrib(me, i, salt);
	t->checks++;
	if ((max ? c->allreduce_max : c->allreduce_sum)(c->ctx, buf, len, &e)) {
		fprintf(stderr, "mpi_probe: rank %d: %s\n", me, e.msg);
		t->failures++;
		free(buf);
		return;
	}
	for (size_t i = 0; i < len; i++) {
		double acc = contrib(members[0], i, salt);
		float m = (float)acc, rev = contrib(members[n - 1], i, salt), want;

		for (int q = 1; q < n; q++) {
			float x = contrib(members[q], i, salt);

			acc += x;
			m = x > m ? x : m;
		}
		for (int q = n - 2; q >= 0; q--)
			rev += contrib(members[q], i, salt);
		want = max ? m : (float)acc;
		if (memcmp(&want, &buf[i], sizeof want)) {
			if (!t->failures)
				fprintf(stderr, "mpi_probe: rank %d: element %zu of %zu is %a, not %a\n",
					me, i, len, (double)buf[i], (double)want);
			t->failures++;
		}
		t->order_sensitive += !max && rev != want;
	}
	t->digest = XXH3_64bits_withSeed(buf, len * sizeof *buf, t->digest);
	free(buf);
}

/* Every member sends two messages to the next member (step 1) or the
 * previous one (step -1) before it receives two from the other side. */
static void check_ring(const struct comm *c, const int *members, int step, struct tally *t)
{
	const size_t len = (size_t)1 << 16;
	int to = (c->rank + step + c->size) % c->size, from = (c->rank - step + c->size) % c->size;
	float *out = malloc(len * sizeof *out), *in = malloc(len * sizeof *in);
	struct err e = { 0 };

	for (int k = 0; k < 2; k++) {
		for (size_t i = 0; i < len; i++)
			out[i] = contrib(me, i, 100 + (uint64_t)k);
		t->checks++;
		if (c->send(c->ctx, to, out, len, &e)) {
			fprintf(stderr, "mpi_probe: rank %d: %s\n", me, e.msg);
			t->failures++;
		}
	}
	memset(out, 0, len * sizeof *out);
	for (int k = 0; k < 2; k++) {
		t->checks++;
		if (c->recv(c->ctx, from, in, len, &e)) {
			fprintf(stderr, "mpi_probe: rank %d: %s\n", me, e.msg);
			t->failures++;
			continue;
		}
		for (size_t i = 0; i < len; i++)
			if (in[i] != contrib(members[from], i, 100 + (uint64_t)k)) {
				t->failures++;
				break;
			}
	}
	free(out);
	free(in);
}

static void check_comm(const struct comm *c, const int *members, int n, uint64_t salt,
		       struct tally *t)
{
	static const size_t lens[] = { 0, 1, 3, 1000, 20011 };

	for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
		check_reduce(c, members, n, lens[l], salt + l, false, t);
		check_reduce(c, members, n, lens[l], salt + l, true, t);
	}
	if (c->size > 1) {
		check_ring(c, members, 1, t);
		check_ring(c, members, -1, t);
	}
}

static void check_groups(const struct groups *g, bool first, struct tally *t)
{
	int *world = malloc((size_t)nranks * sizeof *world);

	for (int w = 0; w < nranks; w++)
		world[w] = w;
	check_comm(&g->world, world, nranks, 1, t);
	/* longer than the 2^22 floats reduced at once */
	if (first)
		check_reduce(&g->world, world, nranks, ((size_t)1 << 22) + 5, 7, false, t);
	free(world);
	for (int i = 0; i < g->rr.n; i++)
		for (int k = 0; k < NGROUPS; k++) {
			const struct rank_role *ro = &g->rr.r[i];
			const struct comm *c = &g->comm[i][k];

			if (ro->group_rank[k] < 0) {
				float x = 0;
				struct err e = { 0 };

				/* outside a group, its calls fail and name it */
				t->checks++;
				if (c->size != 0 || c->allreduce_sum(c->ctx, &x, 1, &e) != NR_EIO ||
				    !strstr(e.msg, "is not in the"))
					t->failures++;
				continue;
			}
			if (c->size != ro->nmembers[k] || c->rank != ro->group_rank[k])
				t->failures++;
			check_comm(c, ro->members[k], ro->nmembers[k], 1000 * (uint64_t)(i * NGROUPS + k),
				   t);
		}
}

static int groups_main(int argc, char **argv)
{
	struct env_docs d;
	struct groups g;
	struct err e = { 0 };

	if (argc < 5)
		return 2;
	load_env(&d, argv[2], argv[3]);
	for (int i = 4; i < argc; i++) {
		static struct plan p;
		struct tally t = { 0 }, *all = malloc((size_t)nranks * sizeof *all);
		int rc = plan_load(&d.v, &p, argv[i], &e);

		if ((rc = mpi_agree_on(MPI_COMM_WORLD, rc, &e)))
			fail(&e);
		rc = i == 4 ? mpi_groups_build(&g, &d.v, &p, &e) : mpi_groups_rebuild(&g, &d.v, &p, &e);
		if (rc)
			fail(&e);
		check_groups(&g, i == 4, &t);
		MPI_Gather(&t, 4, MPI_UINT64_T, all, 4, MPI_UINT64_T, 0, MPI_COMM_WORLD);
		if (me == 0) {
			struct tally sum = { 0 };

			for (int w = 0; w < nranks; w++) {
				sum.checks += all[w].checks;
				sum.failures += all[w].failures;
				sum.order_sensitive += all[w].order_sensitive;
				sum.digest = XXH3_64bits_withSeed(&all[w].digest, sizeof all[w].digest,
								  sum.digest);
			}
			printf("{\"plan\": \"%s\", \"ranks\": %d, \"checks\": %llu, \"failures\": %llu, "
			       "\"order_sensitive\": %llu, \"digest\": \"%016llx\"}\n", argv[i], nranks,
			       (unsigned long long)sum.checks, (unsigned long long)sum.failures,
			       (unsigned long long)sum.order_sensitive,
			       (unsigned long long)sum.digest);
			fflush(stdout);
		}
		free(all);
	}
	mpi_groups_free(&g);
	return 0;
}

/* --- mkstore ----------------------------------------------------------------------------- */

/* Element li of piece p (row-major in its box) as a global index. */
static int64_t global_of(const struct piece *p, const struct gtensor *t, int64_t li)
{
	int64_t gi = 0, stride = 1;

	for (int d = t->ndim - 1; d >= 0; d--) {
		gi += (p->box.off[d] + li % p->box.ext[d]) * stride;
		li /= p->box.ext[d];
		stride *= t->shape[d];
	}
	return gi;
}

static int mkstore_main(int argc, char **argv)
{
	struct env_docs d;
	struct mstate st[MAX_MODELS];
	struct store_state ss[MAX_MODELS];
	struct store_opts o = { .no_sync = true };
	struct err e = { 0 };
	uint64_t seed;

	if (argc != 5 && (argc != 6 || strcmp(argv[5], "f32-norms")))
		return 2;
	me = 0;
	load_env(&d, argv[2], NULL);
	seed = strtoull(argv[3], NULL, 10);
	for (int m = 0; m < d.job.nmodels; m++) {
		const struct model *md = &d.job.models[m];
		bool train = model_trainable(md);

		if (mstate_init(&st[m], md, m, 1, 1, 1, ZERO_0, train, 0, 0, 0, &e))
			fail(&e);
		for (int l = 0; argc == 6 && l < md->arch.layers; l++) {
			st[m].wdtype[layout_tensor_index(&md->arch, l, LT_INPUT_NORM)] = ST_F32;
			st[m].wdtype[layout_tensor_index(&md->arch, l, LT_PRE_MLP_NORM)] = ST_F32;
		}
		if (argc == 6)
			st[m].wdtype[layout_final_norm_index(&md->arch)] = ST_F32;
		for (int k = 0; k < (train ? NKINDS : 1); k++) {
			struct piece *p;
			size_t n;

			if (layout_pieces(&st[m].lo, (enum state_kind)k, 0, 0, 0, &p, &n, &e))
				fail(&e);
			for (size_t i = 0; i < n; i++) {
				float *x = st[m].buf[k] + p[i].local_off;
				int64_t vol = box_volume(&p[i].box);

				for (int64_t li = 0; li < vol; li++) {
					uint64_t key = seed ^ ((uint64_t)m << 56) ^ ((uint64_t)k << 52) ^
						       ((uint64_t)p[i].tensor << 36) ^
						       (uint64_t)global_of(&p[i], &st[m].lo.tensors[p[i].tensor], li);
					double u = unit(key);

					x[li] = (float)(k == KIND_ADAM_V ? u * 1e-3 : 2 * u - 1);
				}
				if (k == KIND_WEIGHT)
					st_round(x, (size_t)vol, (enum st_dtype)st[m].wdtype[p[i].tensor]);
			}
			free(p);
		}
		ss[m] = (struct store_state){
			.lo = { .arch = md->arch, .tp = 1, .pp = 1, .dp = 1, .trainable = train },
			.wdtype = st[m].wdtype, .buffer = mstate_buffer, .ctx = &st[m],
		};
		snprintf(ss[m].lo.name, sizeof ss[m].lo.name, "%s", md->name);
	}
	if (store_save(argv[4], ss, d.job.nmodels, NULL, &o, &e))
		fail(&e);
	for (int m = 0; m < d.job.nmodels; m++)
		mstate_free(&st[m]);
	return 0;
}

/* --- live -------------------------------------------------------------------------------- */

/* This rank's state of plan p, from store. */
static int load_state(const struct env *v, const struct plan *p, const char *store,
		      struct rank_state *s, struct err *e)
{
	struct rank_roles rr;
	struct store_reader *r = NULL;
	int rc = rank_roles_build(v, p, me, nranks, &rr, e);

	if (rc)
		return rc;
	rc = rank_state_init(s, v, &rr, e);
	rank_roles_free(&rr);
	if (!rc && !(rc = store_reader_open(&r, store, e)))
		rc = rank_state_load(s, r, store, e);
	if (r)
		store_reader_close(r);
	if (rc)
		rank_state_free(s);
	return rc;
}

/* Floats compared and mismatched between two states of one plan. */
static void compare(const struct rank_state *got, const struct rank_state *want, uint64_t c[2])
{
	for (int i = 0; i < want->n; i++) {
		if (got->held[i] != want->held[i]) {
			c[1]++;
			continue;
		}
		for (int k = 0; want->held[i] && k < NKINDS; k++) {
			const struct mstate *a = &got->st[i], *b = &want->st[i];

			if (!b->buf[k])
				continue;
			if (!a->buf[k] || a->len[k] != b->len[k]) {
				c[1]++;
				continue;
			}
			for (size_t j = 0; j < b->len[k]; j++)
				if (memcmp(&a->buf[k][j], &b->buf[k][j], sizeof(float))) {
					if (!c[1])
						fprintf(stderr, "mpi_probe: rank %d: %s %s element %zu is %a, "
							"not %a\n", me, b->name, state_kind_names[k], j,
							(double)a->buf[k][j], (double)b->buf[k][j]);
					c[1]++;
				}
			c[0] += b->len[k];
		}
	}
}

static int live_main(int argc, char **argv)
{
	struct env_docs d;
	static struct plan p[2];
	struct rank_state cur, next, want;
	struct err e = { 0 };
	int rc;

	if (argc < 8 || (argc - 6) % 2)
		return 2;
	load_env(&d, argv[2], argv[3]);
	rc = plan_load(&d.v, &p[0], argv[5], &e);
	if (!rc)
		rc = load_state(&d.v, &p[0], argv[4], &cur, &e);
	if ((rc = mpi_agree_on(MPI_COMM_WORLD, rc, &e)))
		fail(&e);
	for (int i = 6, at = 0; i < argc; i += 2, at ^= 1) {
		struct exec_stats st;
		uint64_t c[3] = { 0, 0, 0 };
		int held = 0;

		for (int j = 0; j < cur.n; j++)
			held += cur.held[j];
		c[2] = held == 0;
		rc = plan_load(&d.v, &p[at ^ 1], argv[i], &e);
		if ((rc = mpi_agree_on(MPI_COMM_WORLD, rc, &e)))
			fail(&e);
		if ((rc = live_move(&d.v, &p[at], &p[at ^ 1], &cur, &next, &st, &e)))
			fail(&e);
		rank_state_free(&cur);
		cur = next;
		rc = load_state(&d.v, &p[at ^ 1], argv[i + 1], &want, &e);
		if ((rc = mpi_agree_on(MPI_COMM_WORLD, rc, &e)))
			fail(&e);
		compare(&cur, &want, c);
		rank_state_free(&want);
		MPI_Allreduce(MPI_IN_PLACE, c, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
		if (me == 0) {
			printf("{\"from\": \"%s\", \"to\": \"%s\", \"ranks_holding_nothing\": %llu, "
			       "\"floats\": %llu, \"mismatched\": %llu, \"pieces\": %ld, "
			       "\"bytes_sent\": %llu, \"rounds\": %d, \"seconds\": %.6f, "
			       "\"total_seconds\": %.6f, \"predicted_s\": %.6f}\n",
			       argv[i == 6 ? 5 : i - 2], argv[i], (unsigned long long)c[2],
			       (unsigned long long)c[0], (unsigned long long)c[1], st.pieces_taken,
			       (unsigned long long)st.bytes_sent, st.rounds, st.seconds,
			       st.total_seconds, st.predicted_s);
			fflush(stdout);
		}
	}
	rank_state_free(&cur);
	return 0;
}

int main(int argc, char **argv)
{
	struct err e;
	int rc;

	if (argc > 1 && !strcmp(argv[1], "mkstore"))
		return mkstore_main(argc, argv);
	if (argc < 2 || (strcmp(argv[1], "groups") && strcmp(argv[1], "live"))) {
		fprintf(stderr, "usage: mpi_probe groups|mkstore|live ...\n");
		return 2;
	}
	if (mpi_begin(&argc, &argv, &me, &nranks, &e)) {
		fprintf(stderr, "mpi_probe: MPI does not start\n");
		return 4;
	}
	rc = !strcmp(argv[1], "groups") ? groups_main(argc, argv) : live_main(argc, argv);
	if (rc == 2 && me == 0)
		fprintf(stderr, "mpi_probe: bad arguments\n");
	mpi_end();
	return rc;
}
