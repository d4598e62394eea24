/* Loading libnereus-cuda.so (cudalib.h). */
#include "cuda/cudalib.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>

/* The pointers have the functions' own types (a check that refers to the
 * functions without linking them). */
_Static_assert(_Generic(&gpub_run, gpub_run_fn *: 1, default: 0),
	       "gpub_run_fn is not gpub_run's type");
_Static_assert(_Generic(&live_reshard_nccl, live_reshard_nccl_fn *: 1, default: 0),
	       "live_reshard_nccl_fn is not live_reshard_nccl's type");

/* The function symbol of h named name into *fn, a function pointer: POSIX
 * guarantees the conversion, ISO C does not spell it, so the bits are
 * copied. */
static bool resolve(void *h, const char *name, void *fn, size_t size)
{
	void *sym = dlsym(h, name);

	if (!sym || size != sizeof sym)
		return false;
	memcpy(fn, &sym, sizeof sym);
	return true;
}

int cuda_lib_load(struct cuda_lib *lib, struct err *e)
{
	void *h = dlopen(CUDA_LIB_NAME, RTLD_NOW | RTLD_LOCAL);
	const char *why;

	if (!h) {
		why = dlerror();
		return err_set(e, NR_EIO, "cannot load '%s', the GPU part of this build: %s",
			       CUDA_LIB_NAME, why ? why : "unknown error");
	}
	if (!resolve(h, "gpub_run", &lib->gpub_run, sizeof lib->gpub_run) ||
	    !resolve(h, "live_reshard_nccl", &lib->live_reshard_nccl,
		     sizeof lib->live_reshard_nccl))
		return err_set(e, NR_EIO, "'%s' is not the GPU part of this build: it lacks "
			       "gpub_run or live_reshard_nccl", CUDA_LIB_NAME);
	return NR_OK;
}
