/* The GPU half of a build with CUDA, loaded when it is needed.
 *
 * The .cu files of lib/cuda are built into libnereus-cuda.so, which links
 * the CUDA runtime, cuBLAS and NCCL.  The tools do not link it: they load
 * it with cuda_lib_load only when they take a GPU path (nereus-profile
 * bench's GPU figures, nereus-transition live --nccl), so that a build
 * with CUDA runs everything else on a machine without the CUDA runtime.
 * The library calls back into the tool's own libnereus (err_set, exec_run,
 * ...), which the tools export to it.  It is found as any shared library
 * is: the tools' run path names their own directory (the build directory)
 * and the directory the library is installed in. */
#ifndef NEREUS_CUDALIB_H
#define NEREUS_CUDALIB_H

#include "common/err.h"
#include "cuda/gpubench.h"
#include "cuda/live_nccl.h"

#define CUDA_LIB_NAME "libnereus-cuda.so"

/* The library's functions, as gpubench.h and live_nccl.h declare them. */
typedef int gpub_run_fn(const struct hw_opts *o, struct hw_gpu *r, struct err *e);
typedef int live_reshard_nccl_fn(const struct env *v, const struct plan *a,
				 const struct plan *b, const char *src_store,
				 const char *verify_store, struct exec_stats *st,
				 struct err *e);

struct cuda_lib {
	gpub_run_fn *gpub_run;
	live_reshard_nccl_fn *live_reshard_nccl;
};

/* Load the library and fill lib; NR_EIO naming the library and why (the
 * loader's own words: a missing CUDA runtime names its file) when it cannot
 * be loaded.  It stays loaded until the process exits: the CUDA runtime
 * does not support being unloaded. */
int cuda_lib_load(struct cuda_lib *lib, struct err *e);

#endif
