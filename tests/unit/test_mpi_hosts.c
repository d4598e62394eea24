/* Ranks on the hosts a cluster document says (lib/mpi/start.h), without
 * MPI: world rank r plays GPU r, of node r / gpus_per_node, and a node is
 * one host.  The host names are given, as MPI_Allgather would gather them. */
#include "mpi/start.h"
#include "unit.h"

#include <string.h>

#define STRIDE 16

/* names: n host names of at most STRIDE - 1 bytes; the rule's verdict. */
static int agree(const char *const *names, int n, int gpn, struct err *e)
{
	char buf[8 * STRIDE] = { 0 };

	for (int r = 0; r < n; r++)
		strcpy(buf + r * STRIDE, names[r]);
	memset(e, 0, sizeof *e);
	return mpi_hosts_agree(buf, STRIDE, n, gpn, e);
}

static void test_hosts_as_nodes(void)
{
	static const char *const two_by_two[] = { "a", "a", "b", "b" };
	static const char *const one_host[] = { "a", "a", "a", "a" };
	static const char *const split_node[] = { "a", "a", "b", "c" };
	static const char *const back[] = { "a", "b", "a" };
	struct err e;

	/* 2 nodes of 2 GPUs on hosts a and b */
	CHECK(agree(two_by_two, 4, 2, &e) == NR_OK);
	/* 1 node of 4 GPUs on one host */
	CHECK(agree(one_host, 4, 4, &e) == NR_OK);
	/* fewer ranks than the cluster's GPUs: the ones that run */
	CHECK(agree(two_by_two, 3, 2, &e) == NR_OK);
	/* 2 nodes of 2 GPUs, all on one host: node 1 shares node 0's */
	CHECK(agree(one_host, 4, 2, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "rank 2, the first of node 1 of the cluster, is on host 'a' "
		     "with rank 0 of node 0: each node is a host of its own") == 0);
	/* node 1's two ranks on two hosts */
	CHECK(agree(split_node, 4, 2, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "rank 3 is on host 'c', but rank 2, of the same node 1 of the "
		     "cluster, is on host 'b': a node is one host") == 0);
	/* node 2 back on node 0's host, node 1's in between */
	CHECK(agree(back, 3, 1, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "rank 2, the first of node 2 of the cluster, is on host 'a' "
		     "with rank 0 of node 0: each node is a host of its own") == 0);
}

int main(void)
{
	RUN(test_hosts_as_nodes);
	return UNIT_END();
}
