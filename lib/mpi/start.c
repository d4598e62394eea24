/* Starting and stopping MPI (start.h). */
#include "mpi/start.h"

#include <mpi.h>
#include <stdlib.h>

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

void mpi_end(void)
{
	int done = 0;

	MPI_Finalized(&done);
	if (!done)
		MPI_Finalize();
}
