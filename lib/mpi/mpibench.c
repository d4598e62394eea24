/* MPI benchmarks between the ranks of one job; see mpibench.h. */
#include "mpi/mpibench.h"

#include <mpi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)

int mpib_agree(int status)
{
	int worst = status;

	MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	return worst;
}

int mpib_hold(void)
{
	int status = NR_EIO, flag = 0;
	MPI_Request req;
	struct timespec nap = { 0, 1000000 }; /* 1 ms */

	MPI_Ibcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
	for (;;) {
		MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
		if (flag)
			break;
		nanosleep(&nap, NULL);
	}
	return status;
}

void mpib_release(int status)
{
	MPI_Request req;

	MPI_Ibcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
	MPI_Wait(&req, MPI_STATUS_IGNORE);
}

enum op { OP_SENDRECV, OP_ALLREDUCE, OP_ALLGATHER };

struct bench {
	const struct hw_opts *o;
	int rank, size;
	float *send, *recv;
	double target;    /* seconds a timed run lasts at least */
	double *rate, *secs; /* per run, rank 0 */
};

/* One operation of kind op on `bytes` (see mpibench.h for what it counts). */
static void one(const struct bench *b, enum op op, size_t bytes)
{
	int count;

	switch (op) {
	case OP_SENDRECV:
		count = (int)(bytes / sizeof(float));
		if (b->rank == 0) {
			MPI_Send(b->send, count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
			MPI_Recv(b->recv, count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else if (b->rank == 1) {
			MPI_Recv(b->recv, count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Send(b->send, count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
		}
		break;
	case OP_ALLREDUCE:
		count = (int)(bytes / sizeof(float));
		MPI_Allreduce(b->send, b->recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		break;
	case OP_ALLGATHER:
		count = (int)(bytes / sizeof(float) / (size_t)b->size);
		MPI_Allgather(b->send, count, MPI_FLOAT, b->recv, count, MPI_FLOAT, MPI_COMM_WORLD);
		break;
	}
}

/* Time `reps` operations; the slowest rank's seconds, on rank 0. */
static double timed(const struct bench *b, enum op op, size_t bytes, long reps)
{
	double t0, t, tmax = 0;

	if (op == OP_SENDRECV) {
		if (b->rank > 1)
			return 0;
		t0 = hw_now();
		for (long i = 0; i < reps; i++)
			one(b, op, bytes);
		return hw_now() - t0; /* rank 0 times the round trips */
	}
	MPI_Barrier(MPI_COMM_WORLD);
	t0 = hw_now();
	for (long i = 0; i < reps; i++)
		one(b, op, bytes);
	t = hw_now() - t0;
	MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	return tmax;
}

static void series(struct bench *b, enum op op, struct hw_series *s)
{
	static const char *const names[] = { "MPI send/recv", "MPI all-reduce", "MPI all-gather" };
	double max = b->o->quick ? 4 * MIB : 64 * MIB, n = b->size, dummy;
	int warm = b->o->warmup > 0 ? b->o->warmup : 1;

	memset(s, 0, sizeof *s);
	for (double sz = 4 * KIB; sz <= max && s->n < HW_SERIES_MAX; sz *= 4) {
		size_t bytes = (size_t)sz;
		double t, algbw, factor;
		long reps;
		char what[64];

		if (op == OP_ALLGATHER) /* a whole number of floats from every rank */
			bytes = bytes / (sizeof(float) * (size_t)b->size) * sizeof(float) *
				(size_t)b->size;
		if (b->rank == 0 && b->o->progress) {
			snprintf(what, sizeof what, "%s %.0f KiB", names[op], (double)bytes / KIB);
			b->o->progress(b->o->progress_arg, what);
		}
		/* warm up, and agree on how many operations make one run */
		t = timed(b, op, bytes, warm) / warm;
		reps = t > 0 ? (long)ceil(b->target / t) : 1;
		reps = reps < 1 ? 1 : reps > 1000 ? 1000 : reps;
		MPI_Bcast(&reps, 1, MPI_LONG, 0, MPI_COMM_WORLD);
		for (int r = 0; r < b->o->runs; r++) {
			t = timed(b, op, bytes, reps) / (double)reps;
			if (op == OP_SENDRECV)
				t /= 2; /* one way */
			b->secs[r] = t * 1e6;
			b->rate[r] = t > 0 ? (double)bytes / t / 1e9 : 0;
		}
		if (b->rank != 0)
			continue;
		factor = op == OP_ALLREDUCE ? 2 * (n - 1) / n : op == OP_ALLGATHER ? (n - 1) / n : 1;
		s->x[s->n] = (double)bytes;
		hw_stats(b->rate, (size_t)b->o->runs, &algbw, &s->spread[s->n]);
		s->value[s->n] = algbw * factor;
		hw_stats(b->secs, (size_t)b->o->runs, &s->time_us[s->n], &dummy);
		s->n++;
	}
	snprintf(s->unit, sizeof s->unit, "GB/s");
	snprintf(s->axis, sizeof s->axis, "bytes");
	s->runs = b->o->runs;
	switch (op) {
	case OP_SENDRECV:
		snprintf(s->method, sizeof s->method,
			 "MPI_Send/MPI_Recv ping-pong of random fp32 data between ranks 0 and 1 "
			 "of %d; time one way = round trip / 2; busbw = bytes / time; each run "
			 "repeats the exchange to last at least %.0f ms; untimed warm-up exchanges: %d",
			 b->size, b->target * 1e3, warm);
		break;
	case OP_ALLREDUCE:
		snprintf(s->method, sizeof s->method,
			 "MPI_Allreduce (MPI_SUM of random fp32 data) over %d ranks; time of the "
			 "slowest rank; busbw = bytes / time * 2(n-1)/n, as nccl-tests; each run "
			 "repeats the call to last at least %.0f ms; untimed warm-up calls: %d",
			 b->size, b->target * 1e3, warm);
		break;
	case OP_ALLGATHER:
		snprintf(s->method, sizeof s->method,
			 "MPI_Allgather of random fp32 data over %d ranks, bytes = total gathered "
			 "size; time of the slowest rank; busbw = bytes / time * (n-1)/n, as "
			 "nccl-tests; each run repeats the call to last at least %.0f ms; "
			 "untimed warm-up calls: %d", b->size, b->target * 1e3, warm);
		break;
	}
}

/* The time of one communicator call, the slowest rank's, on rank 0: dup of
 * the world, or a split of it into pairs of ranks.  The communicator made
 * is freed after, untimed. */
static double comm_once(bool split)
{
	MPI_Comm c;
	double t0, t, tmax = 0;
	int rank;

	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Barrier(MPI_COMM_WORLD);
	t0 = hw_now();
	if (split)
		MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &c);
	else
		MPI_Comm_dup(MPI_COMM_WORLD, &c);
	t = hw_now() - t0;
	MPI_Comm_free(&c);
	MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	return tmax;
}

static void comm_figure(struct bench *b, bool split, struct hw_figure *f)
{
	int warm = b->o->warmup > 0 ? b->o->warmup : 1;

	if (b->rank == 0 && b->o->progress)
		b->o->progress(b->o->progress_arg, split ? "MPI communicator split" :
				"MPI communicator creation");
	for (int i = 0; i < warm; i++)
		comm_once(split);
	for (int r = 0; r < b->o->runs; r++)
		b->secs[r] = comm_once(split) * 1e3;
	if (b->rank != 0)
		return;
	hw_stats(b->secs, (size_t)b->o->runs, &f->value, &f->spread);
	snprintf(f->unit, sizeof f->unit, "ms");
	snprintf(f->method, sizeof f->method, split ?
		 "MPI_Comm_split of MPI_COMM_WORLD (%d ranks) into pairs of ranks; time of the "
		 "slowest rank, the new communicator freed after, untimed; untimed warm-up "
		 "calls: %d" : "MPI_Comm_dup of MPI_COMM_WORLD (%d ranks); time of the slowest "
		 "rank, the new communicator freed after, untimed; untimed warm-up calls: %d",
		 b->size, warm);
	f->runs = b->o->runs;
}

int mpib_run(const struct hw_opts *o, struct hw_mpi *r, struct err *e)
{
	struct bench b = { .o = o, .target = o->quick ? 0.005 : 0.02 };
	size_t max = (size_t)(o->quick ? 4 * MIB : 64 * MIB);
	int ok, all_ok = 0, len = 0;
	char lib[MPI_MAX_LIBRARY_VERSION_STRING];

	memset(r, 0, sizeof *r);
	MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &b.size);
	if (b.size < 2)
		return err_set(e, NR_EINPUT, "MPI benchmarks need at least 2 ranks, got %d",
			       b.size);
	b.send = malloc(max);
	b.recv = malloc(max);
	b.rate = calloc((size_t)o->runs, sizeof *b.rate);
	b.secs = calloc((size_t)o->runs, sizeof *b.secs);
	ok = b.send && b.recv && b.rate && b.secs;
	MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (!all_ok) {
		free(b.send);
		free(b.recv);
		free(b.rate);
		free(b.secs);
		return err_set(e, NR_EIO, "MPI benchmarks: cannot allocate 2 x %.0f MiB per rank",
			       (double)max / MIB);
	}
	hw_fill_random_f32(b.send, max / sizeof(float), 100 + (uint64_t)b.rank);
	hw_fill_random_f32(b.recv, max / sizeof(float), 200 + (uint64_t)b.rank);
	r->ranks = b.size;
	MPI_Get_library_version(lib, &len);
	lib[strcspn(lib, ",\n")] = '\0';
	snprintf(r->library, sizeof r->library, "%.120s", lib);
	for (char *p = r->library; *p; p++) /* plain ASCII for JSON */
		if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
			*p = '?';
	series(&b, OP_SENDRECV, &r->sendrecv);
	series(&b, OP_ALLREDUCE, &r->allreduce);
	series(&b, OP_ALLGATHER, &r->allgather);
	comm_figure(&b, false, &r->comm_dup);
	comm_figure(&b, true, &r->comm_split);
	free(b.send);
	free(b.recv);
	free(b.rate);
	free(b.secs);
	return NR_OK;
}
