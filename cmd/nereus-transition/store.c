/* nereus-transition's store calls (apply, import, export): interrupts,
 * progress and notices on standard error, and the layouts a plan gives
 * the job's models. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "doc/costdoc.h"
#include "transition.h"

/* Set by SIGINT or SIGTERM; the store functions poll it, remove their
 * temporary and return NR_EIO, so an interrupted run leaves no output. */
static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void draw_progress(void *ctx, uint64_t done, uint64_t total)
{
	struct progress *p = ctx;
	int pct = total ? (int)(done * 100 / total) : 100;

	if (pct == p->shown)
		return;
	p->shown = pct;
	fprintf(stderr, "\r%s: %3d%% of %.1f MiB", progname, pct, (double)total / (1 << 20));
	fflush(stderr);
}

static void tell(void *ctx, const char *msg)
{
	(void)ctx;
	warnx_("%s", msg);
}

void store_begin(struct store_opts *o, struct progress *p)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_interrupt;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	p->shown = -1;
	memset(o, 0, sizeof *o);
	o->cancel = &interrupted;
	o->notice = tell;
	if (show_progress()) {
		o->progress = draw_progress;
		o->progress_ctx = p;
	}
}

int store_end(const struct progress *p, int rc, const struct err *e)
{
	if (p->shown >= 0)
		fputc('\n', stderr);
	return rc ? report(e) : NR_OK;
}

int plan_layouts(const char *jobf, const char *clf, const char *planf, struct job *job,
		 struct cluster *cl, struct plan *p, struct store_layout *to, struct err *e)
{
	struct coef k;
	struct env v = { job, cl, &k };
	int rc;

	cost_coef_defaults(&k);
	if ((rc = job_load(job, jobf, e)) || (rc = cluster_load(cl, clf, e)) ||
	    (rc = plan_load(&v, p, planf, e)))
		return rc;
	store_layouts_of_plan(job, p, to);
	return NR_OK;
}

int held_layouts(const char *src, struct store_layout *lo, int nlo, int *n, struct err *e)
{
	struct store_layout held[MAX_MODELS];
	int nheld, rc;

	if ((rc = store_layouts(src, held, MAX_MODELS, &nheld, e)))
		return rc;
	*n = 0;
	for (int m = 0; m < nlo; m++)
		for (int k = 0; k < nheld; k++)
			if (strcmp(lo[m].name, held[k].name) == 0) {
				lo[(*n)++] = lo[m];
				break;
			}
	if (!*n)
		return err_set(e, NR_EINPUT, "store '%s' holds none of the job's models", src);
	return NR_OK;
}
