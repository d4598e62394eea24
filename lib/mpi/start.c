/* Starting and stopping MPI (start.h). */
#include "mpi/start.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

bool mpi_launched(void)
{
	static const char *const vars[] = {
		"OMPI_COMM_WORLD_SIZE", /* Open MPI's mpirun */
		"PMIX_RANK",            /* PMIx launchers (Open MPI, Slurm) */
		"PMI_SIZE",             /* Hydra (MPICH), Slurm PMI-1/2 */
		"PMI_RANK",
		NULL,
	};

	for (int i = 0; vars[i]; i++)
		if (getenv(vars[i]))
			return true;
	return false;
}

int mpi_begin(int *argc, char ***argv, int *rank, int *size, struct err *e)
{
	int done = 0;

	MPI_Initialized(&done);
	if (!done && MPI_Init(argc, argv) != MPI_SUCCESS)
		return err_set(e, NR_EIO, "cannot initialise MPI");
	MPI_Comm_rank(MPI_COMM_WORLD, rank);
	MPI_Comm_size(MPI_COMM_WORLD, size);
	return NR_OK;
}

int mpi_hosts_agree(const char *names, size_t stride, int n, int gpn, struct err *e)
{
	for (int r = 1; r < n; r++) {
		const char *host = names + (size_t)r * stride;
		int node = r / gpn, first = node * gpn;

		if (r != first) {
			const char *want = names + (size_t)first * stride;
			if (strcmp(host, want) != 0)
				return err_set(e, NR_EINPUT, "rank %d is on host '%s', but rank %d, "
					       "of the same node %d of the cluster, is on host '%s': "
					       "a node is one host", r, host, first, node, want);
			continue;
		}
		for (int k = 0; k < node; k++)
			if (strcmp(host, names + (size_t)k * gpn * stride) == 0)
				return err_set(e, NR_EINPUT, "rank %d, the first of node %d of the "
					       "cluster, is on host '%s' with rank %d of node %d: "
					       "each node is a host of its own", r, node, host,
					       k * gpn, k);
	}
	return NR_OK;
}

int mpi_check_hosts(const struct cluster *c, struct err *e)
{
	char name[MPI_MAX_PROCESSOR_NAME] = { 0 }, *names;
	int len, size, n, rc;

	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Get_processor_name(name, &len);
	names = malloc((size_t)size * sizeof name);
	if (!names)
		return err_oom(e);
	MPI_Allgather(name, (int)sizeof name, MPI_CHAR, names, (int)sizeof name, MPI_CHAR,
		      MPI_COMM_WORLD);
	n = size < cluster_gpus(c) ? size : cluster_gpus(c);
	rc = mpi_hosts_agree(names, sizeof name, n, c->gpus_per_node, e);
	free(names);
	return rc;
}

void mpi_end(void)
{
	int done = 0;

	MPI_Finalized(&done);
	if (!done)
		MPI_Finalize();
}
