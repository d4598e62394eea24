/* comm_self: the one-process group, whose collectives leave buffers as
 * they are and whose point-to-point calls have no peer. */
#include "engine/comm.h"

static int self_reduce(void *ctx, float *buf, size_t n, struct err *e)
{
	(void)ctx;
	(void)buf;
	(void)n;
	(void)e;
	return NR_OK;
}

static int self_send(void *ctx, int to, const float *buf, size_t n, struct err *e)
{
	(void)ctx;
	(void)buf;
	(void)n;
	return err_set(e, NR_EIO, "send to rank %d: a one-process group has no peer", to);
}

static int self_recv(void *ctx, int from, float *buf, size_t n, struct err *e)
{
	(void)ctx;
	(void)buf;
	(void)n;
	return err_set(e, NR_EIO, "receive from rank %d: a one-process group has no peer", from);
}

static int self_agree(void *ctx, int rc, struct err *e)
{
	(void)ctx;
	(void)e;
	return rc;
}

static int self_bcast(void *ctx, int root, void *buf, size_t n, struct err *e)
{
	(void)ctx;
	(void)buf;
	(void)n;
	return root == 0 ? NR_OK : err_set(e, NR_EIO, "broadcast from rank %d: a one-process "
					   "group has no peer", root);
}

static const struct comm self = {
	.size = 1,
	.rank = 0,
	.allreduce_sum = self_reduce,
	.allreduce_max = self_reduce,
	.send = self_send,
	.recv = self_recv,
	.agree = self_agree,
	.bcast = self_bcast,
};

const struct comm *comm_self(void)
{
	return &self;
}
