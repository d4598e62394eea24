/* TensorBoard event files (tblog.h). */
#include "run/tblog.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mem.h"

uint32_t tblog_crc32c(const void *data, size_t n)
{
	const unsigned char *p = data;
	uint32_t crc = 0xFFFFFFFFu;

	/* bit by bit: event files are small, and no table is kept */
	for (size_t i = 0; i < n; i++) {
		crc ^= p[i];
		for (int b = 0; b < 8; b++)
			crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
	}
	return ~crc;
}

uint32_t tblog_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* --- the protobuf wire format -------------------------------------------- */

/* A message being encoded; oom once a growth failed. */
struct pb {
	unsigned char *p;
	size_t n, cap;
	bool oom;
};

static void pb_bytes(struct pb *b, const void *data, size_t n)
{
	if (b->oom)
		return;
	if (mem_grow(&b->p, &b->cap, b->n + n, 1)) {
		b->oom = true;
		return;
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
}

static void pb_varint(struct pb *b, uint64_t v)
{
	unsigned char c[10];
	size_t n = 0;

	do {
		c[n++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
		v >>= 7;
	} while (v);
	pb_bytes(b, c, n);
}

static void pb_le(struct pb *b, uint64_t v, int bytes)
{
	unsigned char c[8];

	for (int i = 0; i < bytes; i++)
		c[i] = (unsigned char)(v >> (8 * i));
	pb_bytes(b, c, (size_t)bytes);
}

/* wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit */
static void pb_key(struct pb *b, int field, int wire)
{
	pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire);
}

static void pb_double(struct pb *b, int field, double v)
{
	uint64_t u;

	memcpy(&u, &v, sizeof u);
	pb_key(b, field, 1);
	pb_le(b, u, 8);
}

static void pb_float(struct pb *b, int field, float v)
{
	uint32_t u;

	memcpy(&u, &v, sizeof u);
	pb_key(b, field, 5);
	pb_le(b, u, 4);
}

static void pb_chunk(struct pb *b, int field, const void *data, size_t n)
{
	pb_key(b, field, 2);
	pb_varint(b, n);
	pb_bytes(b, data, n);
}

/* --- events -------------------------------------------------------------- */

/* tensorflow/core/util/event.proto and framework/summary.proto */
enum { EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5 };
enum { SUMMARY_VALUE = 1, VALUE_TAG = 1, VALUE_SIMPLE = 2 };

/* One TFRecord of the message in b. */
static int put_record(struct tblog *t, const struct pb *b, struct err *e)
{
	unsigned char head[12];
	uint64_t len = b->n;
	uint32_t c;

	if (b->oom)
		return err_oom(e);
	for (int i = 0; i < 8; i++)
		head[i] = (unsigned char)(len >> (8 * i));
	c = tblog_mask(tblog_crc32c(head, 8));
	for (int i = 0; i < 4; i++)
		head[8 + i] = (unsigned char)(c >> (8 * i));
	c = tblog_mask(tblog_crc32c(b->p, b->n));
	if (fwrite(head, 1, sizeof head, t->f) != sizeof head ||
	    fwrite(b->p, 1, b->n, t->f) != b->n ||
	    fputc((int)(c & 0xFF), t->f) == EOF || fputc((int)(c >> 8 & 0xFF), t->f) == EOF ||
	    fputc((int)(c >> 16 & 0xFF), t->f) == EOF || fputc((int)(c >> 24), t->f) == EOF ||
	    fflush(t->f) != 0)
		return err_set(e, NR_EIO, "cannot write '%s': %s", t->path, strerror(errno));
	return NR_OK;
}

/* DIR and the directories above it that are missing, as TensorBoard's
 * writers make a log directory such as logs/run1. */
static int make_dirs(const char *dir, struct err *e)
{
	char *p = strdup(dir);
	int rc = NR_OK;

	if (!p)
		return err_oom(e);
	for (char *s = p + 1; ; s++) {
		bool end = *s == '\0';
		if (*s != '/' && !end)
			continue;
		*s = '\0';
		if (mkdir(p, 0777) != 0 && errno != EEXIST) {
			rc = err_set(e, NR_EIO, "cannot make directory '%s': %s", p, strerror(errno));
			break;
		}
		if (end)
			break;
		*s = '/';
	}
	free(p);
	return rc;
}

int tblog_open(struct tblog *t, const char *dir, double wall_time, struct err *e)
{
	static const char version[] = "brain.Event:2";
	char host[256] = "localhost";
	struct pb b = { 0 };
	size_t size;
	int rc;

	t->f = NULL;
	t->path = NULL;
	if ((rc = make_dirs(dir, e)))
		return rc;
	if (gethostname(host, sizeof host) != 0)
		strcpy(host, "localhost");
	host[sizeof host - 1] = '\0';
	size = strlen(dir) + strlen(host) + 64;
	if (!(t->path = malloc(size)))
		return err_oom(e);
	snprintf(t->path, size, "%s/events.out.tfevents.%010lld.%s", dir,
		 (long long)floor(wall_time), host);
	if (!(t->f = fopen(t->path, "wb"))) {
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", t->path, strerror(errno));
		free(t->path);
		t->path = NULL;
		return rc;
	}
	pb_double(&b, EVENT_WALL_TIME, wall_time);
	pb_key(&b, EVENT_STEP, 0);
	pb_varint(&b, 0);
	pb_chunk(&b, EVENT_FILE_VERSION, version, strlen(version));
	rc = put_record(t, &b, e);
	free(b.p);
	return rc;
}

/* One Summary.Value: tag and simple_value, skipped when v is absent. */
static void scalar(struct pb *sum, const char *tag, double v)
{
	struct pb val = { 0 };

	if (!isfinite(v))
		return;
	pb_chunk(&val, VALUE_TAG, tag, strlen(tag));
	pb_float(&val, VALUE_SIMPLE, (float)v);
	if (val.oom)
		sum->oom = true;
	else
		pb_chunk(sum, SUMMARY_VALUE, val.p, val.n);
	free(val.p);
}

/* The measured time of stage s: the slowest pool's model-stages of s,
 * summed, as plans compose a stage; NAN when one is absent. */
static double stage_s(const struct step_record *r, enum stage s)
{
	double most = NAN;

	for (int i = 0; i < r->nms; i++) {
		double sum = 0;
		bool first = true;
		if (r->ms[i].stage != s)
			continue;
		for (int j = 0; j < i && first; j++)
			first = r->ms[j].stage != s || r->ms[j].pool != r->ms[i].pool;
		if (!first)
			continue;
		for (int j = i; j < r->nms; j++)
			if (r->ms[j].stage == s && r->ms[j].pool == r->ms[i].pool)
				sum += r->ms[j].time_s;
		if (isnan(sum))
			return NAN;
		most = isnan(most) || sum > most ? sum : most;
	}
	return most;
}

/* Every scalar of a step: the record's rl figures as its "rl" object
 * names them, the step's and stages' times measured and as the plan
 * predicted them, the transition, the GPUs up and the transitions so far,
 * and the response lengths. */
static void step_scalars(struct pb *sum, const struct tblog_step *s)
{
	const struct step_record *r = s->rec;
	const struct step_rl *rl = &r->rl;
	const struct plan *p = s->plan && s->plan->feasible ? s->plan : NULL;
	const struct { const char *tag; double v; } rls[] = {
		{ "rl/reward_mean", rl->reward_mean }, { "rl/response_len_mean", rl->response_len_mean },
		{ "rl/kl", rl->kl }, { "rl/policy_loss", rl->policy_loss },
		{ "rl/value_loss", rl->value_loss }, { "rl/entropy", rl->entropy },
		{ "rl/clip_frac", rl->clip_frac }, { "rl/grad_norm", rl->grad_norm },
		{ "rl/lr", rl->lr }, { "rl/sft_loss", rl->sft_loss },
	};
	char tag[64];

	if (rl->known)
		for (size_t i = 0; i < sizeof rls / sizeof rls[0]; i++)
			scalar(sum, rls[i].tag, rls[i].v);
	scalar(sum, "time/step_s", r->step_time_s);
	scalar(sum, "time/step_predicted_s", p ? p->step_time : NAN);
	for (int st = 0; st < NSTAGES; st++) {
		snprintf(tag, sizeof tag, "time/%s_s", job_stage_names[st]);
		scalar(sum, tag, r->status == STEP_OK ? stage_s(r, (enum stage)st) : NAN);
		snprintf(tag, sizeof tag, "time/%s_predicted_s", job_stage_names[st]);
		scalar(sum, tag, p ? p->stage_time[st] : NAN);
	}
	scalar(sum, "time/transition_s", r->transition_s);
	scalar(sum, "time/transition_move_predicted_s", r->sw.known ? r->sw.move_s : NAN);
	scalar(sum, "gpus_up", r->gpus_up);
	scalar(sum, "transitions", (double)s->transitions);
	scalar(sum, "response_len/mean", r->response.mean);
	scalar(sum, "response_len/p90", r->response.p90);
	scalar(sum, "response_len/max", (double)r->response.max);
}

int tblog_write(struct tblog *t, const struct tblog_step *s, struct err *e)
{
	struct pb ev = { 0 }, sum = { 0 };
	int rc;

	step_scalars(&sum, s);
	pb_double(&ev, EVENT_WALL_TIME, s->wall_time);
	pb_key(&ev, EVENT_STEP, 0);
	pb_varint(&ev, (uint64_t)s->rec->step);
	if (sum.oom)
		ev.oom = true;
	else
		pb_chunk(&ev, EVENT_SUMMARY, sum.p, sum.n);
	rc = put_record(t, &ev, e);
	free(ev.p);
	free(sum.p);
	return rc;
}

int tblog_close(struct tblog *t, struct err *e)
{
	int rc = NR_OK;

	if (t->f && fclose(t->f) != 0)
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", t->path, strerror(errno));
	t->f = NULL;
	free(t->path);
	t->path = NULL;
	return rc;
}
