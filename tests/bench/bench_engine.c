/* make bench: the engine against PyTorch on the CPU, measured in the same
 * run, on one fixed model of 32M parameters (8 layers, hidden 512, 8
 * query heads, 4 KV heads, SwiGLU 1408, vocabulary 8192, untied head,
 * fp32):
 *
 *   training tokens/s: forward and backward of the mean next-token
 *     log-prob loss over 4 sequences of 256 tokens, then optim.h's AdamW,
 *     against the same step in PyTorch (autograd and torch.optim.AdamW);
 *     goal >= 1.0x;
 *   generation tokens/s: 16 prompts of 16 tokens, 48 new tokens each,
 *     sampled at temperature 1 with the KV cache, against PyTorch's own
 *     KV-cache loop; goal >= 1.0x;
 *   the training step's FLOP rate (the model's FLOPs: 6 per parameter and
 *     token of the matmuls, causal attention) against OpenBLAS's sgemm on
 *     1024 x 1024 x 1024 on this machine; goal >= 50%.
 *
 * Both sides use the same number of threads: NEREUS_BENCH_THREADS, 1 when
 * unset (OpenBLAS's threads here, torch.set_num_threads there).  PyTorch
 * runs as a child, tests/bench/bench_engine.py under /usr/bin/python3,
 * and the two sides take turns (one engine step, one PyTorch step, one
 * sgemm sample, and again), each time the best of a few turns after a
 * warm-up, so other work on the machine weighs on both alike.  With one
 * thread the times are each process's CPU time, which other work on a
 * shared machine barely changes (with more, wall-clock time: idle
 * threads spinning would count).  Without torch the PyTorch ratios are
 * not printed. */
#include <cblas.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/generate.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "engine/rng.h"

enum { LAYERS = 8, HIDDEN = 512, HEADS = 8, KV = 4, FFN = 1408, VOCAB = 8192 };
enum { TRAIN_B = 4, TRAIN_N = 256, GEN_B = 16, GEN_PROMPT = 16, GEN_NEW = 48 };
enum { REPEAT = 4 };

/* The clock every time is taken on: the process's CPU time with one
 * thread, else wall-clock time. */
static clockid_t clock_for(int threads)
{
	return threads == 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
}

static double now(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fail(const char *what, const struct err *e)
{
	printf("bench_engine: %s: %s\n", what, e->msg);
	exit(1);
}

/* One sample of OpenBLAS's sgemm rate: 1024 x 1024 x 1024, four times. */
static double sgemm_rate(const float *a, const float *b, float *c, clockid_t clk)
{
	int n = 1024;
	double t0 = now(clk);

	for (int r = 0; r < 4; r++)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c,
			    n);
	return 4 * 2.0 * n * n * n / (now(clk) - t0);
}

/* The model's FLOPs of one training step: 6 per matmul parameter and
 * token, and causal attention's four products forward (QKᵀ and PV), eight
 * backward, over the query-key pairs. */
static double train_flops(void)
{
	double T = TRAIN_B * TRAIN_N, D = HIDDEN / HEADS;
	double layer = HIDDEN * (HEADS + 2.0 * KV) * D + HIDDEN * HEADS * D + 3.0 * HIDDEN * FFN;
	double pairs = TRAIN_B * TRAIN_N * (TRAIN_N + 1) / 2.0;

	return 6 * T * (LAYERS * layer + (double)VOCAB * HIDDEN) + LAYERS * 12 * HEADS * D * pairs;
}

/* PyTorch's side: the child and the pipes to and from it. */
struct torch {
	pid_t pid;
	FILE *to, *from;
	bool ok;
};

static void torch_start(struct torch *t, int threads)
{
	static const char *const key[] = { "threads", "layers", "hidden", "heads", "kv-heads",
					   "ffn", "vocab", "train-batch", "train-len", "gen-batch",
					   "gen-prompt", "gen-new", "cpu-time" };
	const int val[] = { threads, LAYERS, HIDDEN, HEADS, KV, FFN, VOCAB, TRAIN_B, TRAIN_N,
			    GEN_B, GEN_PROMPT, GEN_NEW, clock_for(threads) != CLOCK_MONOTONIC };
	char arg[2 + 2 * 13][32], line[256], *argv[2 + 2 * 13 + 1] = { 0 };
	int in[2], out[2];

	memset(t, 0, sizeof *t);
	snprintf(arg[0], sizeof arg[0], "python3");
	snprintf(arg[1], sizeof arg[1], "tests/bench/bench_engine.py");
	for (int i = 0; i < 13; i++) {
		snprintf(arg[2 + 2 * i], sizeof arg[0], "--%s", key[i]);
		snprintf(arg[3 + 2 * i], sizeof arg[0], "%d", val[i]);
	}
	for (int i = 0; i < 2 + 2 * 13; i++)
		argv[i] = arg[i];
	if (pipe(in) || pipe(out))
		return;
	t->pid = fork();
	if (t->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		execv("/usr/bin/python3", argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	t->to = fdopen(in[1], "w");
	t->from = fdopen(out[0], "r");
	t->ok = t->pid > 0 && t->to && t->from && fgets(line, sizeof line, t->from) &&
		strcmp(line, "ready\n") == 0;
}

/* Seconds PyTorch took for one "train" or "gen"; 0 once it has failed. */
static double torch_run(struct torch *t, const char *what)
{
	char line[256];
	double s;

	if (!t->ok)
		return 0;
	fprintf(t->to, "%s\n", what);
	fflush(t->to);
	t->ok = fgets(line, sizeof line, t->from) && sscanf(line, "%lf", &s) == 1 && s > 0;
	return t->ok ? s : 0;
}

static void torch_stop(struct torch *t)
{
	if (t->to)
		fclose(t->to);
	if (t->from)
		fclose(t->from);
	if (t->pid > 0)
		waitpid(t->pid, NULL, 0);
}

static double best_of(double best, double t, int r)
{
	return r > 0 && t > 0 && t < best ? t : best;
}

/* The engine's side: the model, its buffers and both workloads. */
struct engine_side {
	struct layout lo;
	struct piece *p;
	size_t np, n;
	struct decoder m;
	struct model_acts acts;
	struct generator gen;
	float *w, *g, *am, *av;
	struct optim_span *spans;
	size_t nspans;
	struct adamw_config adamw;
	long adam_t;
	int tokens[TRAIN_B * TRAIN_N], start[TRAIN_B + 1];
	float dlogp[TRAIN_B * TRAIN_N];
	int prompt[GEN_B * GEN_PROMPT], pstart[GEN_B + 1];
	int out[GEN_B * GEN_NEW], len[GEN_B];
	float lp[GEN_B * GEN_NEW];
};

static void engine_setup(struct engine_side *s)
{
	struct arch a = {
		.layers = LAYERS, .hidden = HIDDEN, .heads = HEADS, .kv_heads = KV, .ffn = FFN,
		.vocab = VOCAB, .dtype_bytes = 4, .dtype = "fp32", .rope_theta = 10000,
		.norm_eps = 1e-5,
	};
	struct err e = { 0 };

	if (layout_init(&s->lo, &a, 1, 1, 1, false, NULL, &e) ||
	    layout_pieces(&s->lo, KIND_WEIGHT, 0, 0, 0, &s->p, &s->np, &e))
		fail("layout", &e);
	s->n = (size_t)(s->p[s->np - 1].local_off + s->p[s->np - 1].local_len);
	s->w = malloc(s->n * sizeof *s->w);
	s->g = calloc(s->n, sizeof *s->g);
	s->am = calloc(s->n, sizeof *s->am);
	s->av = calloc(s->n, sizeof *s->av);
	for (size_t i = 0; i < s->np; i++) {
		bool norm = s->lo.tensors[s->p[i].tensor].ndim == 1;

		for (int64_t j = 0; j < s->p[i].local_len; j++)
			s->w[s->p[i].local_off + j] =
				norm ? 1.0f : 0.02f * (float)rng_normal(1, RNG_INIT, 0, i, j);
	}
	if (model_init(&s->m, &s->lo, 0, 0, kernels_cpu(), comm_self(), &e) ||
	    model_bind(&s->m, &s->lo, s->w, s->g, &e) ||
	    model_acts_init(&s->acts, &s->m, TRAIN_B * TRAIN_N, TRAIN_N, true, &e) ||
	    generator_init(&s->gen, &s->m, GEN_B, GEN_PROMPT + GEN_NEW, GEN_B * GEN_PROMPT, &e) ||
	    optim_spans(&s->lo, KIND_WEIGHT, 0, 0, 0, &s->spans, &s->nspans, &e))
		fail("model", &e);
	s->adamw = (struct adamw_config){ .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
					  .weight_decay = 0.01 };
	for (int b = 0; b <= TRAIN_B; b++)
		s->start[b] = b * TRAIN_N;
	for (int t = 0; t < TRAIN_B * TRAIN_N; t++) {
		s->tokens[t] = (int)(rng_u64(1, RNG_DATA, 0, 0, t) % VOCAB);
		s->dlogp[t] = -1.0f / (TRAIN_B * (TRAIN_N - 1));
	}
	for (int i = 0; i <= GEN_B; i++)
		s->pstart[i] = i * GEN_PROMPT;
	for (int i = 0; i < GEN_B * GEN_PROMPT; i++)
		s->prompt[i] = (int)(rng_u64(2, RNG_DATA, 0, 0, i) % VOCAB);
}

/* Seconds of one training step. */
static double engine_train(struct engine_side *s, clockid_t clk)
{
	struct batch b = { TRAIN_B, TRAIN_B * TRAIN_N, s->tokens, s->start, NULL, 1.0f };
	struct err e = { 0 };
	double t0 = now(clk);

	memset(s->g, 0, s->n * sizeof *s->g);
	if (model_forward(&s->m, &s->acts, &b, NULL, &(struct model_out){ 0 }, &e) ||
	    model_backward(&s->m, &s->acts, &b, &(struct model_dout){ s->dlogp, NULL, NULL }, NULL,
			   &e))
		fail("training step", &e);
	optim_adamw_step(&s->adamw, s->adamw.lr, ++s->adam_t, s->spans, s->nspans, s->w, s->am, s->av,
		   s->g);
	return now(clk) - t0;
}

/* Seconds of one generation. */
static double engine_generate(struct engine_side *s, uint64_t step, clockid_t clk)
{
	struct gen_params gp = { .temperature = 1, .top_p = 1, .max_new = GEN_NEW, .seed = 7,
				 .step = step };
	struct err e = { 0 };
	double t0 = now(clk);

	if (generator_run(&s->gen, &(struct gen_request){ GEN_B, s->prompt, s->pstart, NULL }, &gp,
		     &(struct gen_result){ s->out, s->lp, s->len }, &e))
		fail("generation", &e);
	return now(clk) - t0;
}

int main(void)
{
	const char *env = getenv("NEREUS_BENCH_THREADS");
	int threads = env && atoi(env) > 0 ? atoi(env) : 1;
	clockid_t clk = clock_for(threads);
	static struct engine_side s;
	struct torch pt;
	double e_train = 1e30, e_gen = 1e30, t_train = 1e30, t_gen = 1e30, rate = 0;
	double flops = train_flops();
	float *a = malloc(sizeof(float) << 20), *b = malloc(sizeof(float) << 20);
	float *c = malloc(sizeof(float) << 20);

	for (int i = 0; i < 1 << 20; i++) {
		a[i] = (float)rng_uniform(1, 9, 0, 0, i);
		b[i] = (float)rng_uniform(1, 9, 0, 1, i);
	}
	openblas_set_num_threads(threads);
	signal(SIGPIPE, SIG_IGN);
	engine_setup(&s);
	torch_start(&pt, threads);
	printf("bench_engine: %.1fM parameters, %d thread%s, %s time%s\n", (double)s.n / 1e6,
	       threads, threads > 1 ? "s" : "", threads > 1 ? "wall-clock" : "CPU",
	       pt.ok ? "" : "; PyTorch not running (no torch?)");
	for (int r = 0; r <= REPEAT; r++) {
		double sr = sgemm_rate(a, b, c, clk);

		e_train = best_of(e_train, engine_train(&s, clk), r);
		t_train = best_of(t_train, torch_run(&pt, "train"), r);
		rate = sr > rate ? sr : rate;
	}
	for (int r = 0; r <= REPEAT; r++) {
		e_gen = best_of(e_gen, engine_generate(&s, (uint64_t)r, clk), r);
		t_gen = best_of(t_gen, torch_run(&pt, "gen"), r);
	}
	torch_stop(&pt);

	double ours_train = TRAIN_B * TRAIN_N / e_train, ours_gen = GEN_B * GEN_NEW / e_gen;

	printf("training %d x %d tokens: %.0f tokens/s", TRAIN_B, TRAIN_N, ours_train);
	if (pt.ok)
		printf(", pytorch %.0f tokens/s: %.2fx (goal >= 1.0x)", TRAIN_B * TRAIN_N / t_train,
		       t_train / e_train);
	printf("\ngeneration %d x (%d + %d) tokens: %.0f tokens/s", GEN_B, GEN_PROMPT, GEN_NEW,
	       ours_gen);
	if (pt.ok)
		printf(", pytorch %.0f tokens/s: %.2fx (goal >= 1.0x)", GEN_B * GEN_NEW / t_gen,
		       t_gen / e_gen);
	printf("\ntraining FLOP rate %.1f GFLOP/s, OpenBLAS sgemm 1024^3 %.1f GFLOP/s: %.0f%% "
	       "(goal >= 50%%)\n", flops / e_train / 1e9, rate / 1e9, 100 * flops / e_train / rate);
	generator_free(&s.gen);
	model_acts_free(&s.acts);
	model_free(&s.m);
	layout_free(&s.lo);
	free(s.p);
	free(s.w);
	free(s.g);
	free(s.am);
	free(s.av);
	free(s.spans);
	free(a);
	free(b);
	free(c);
	return 0;
}
