/* Live resharding over NCCL: one process drives every local GPU, GPU r
 * playing rank r of the transition executor (state/exec.h); each round's messages are
 * one ncclGroupStart/End of ncclSend/ncclRecv between the GPUs. */
#ifndef NEREUS_LIVE_NCCL_H
#define NEREUS_LIVE_NCCL_H

#include "state/exec.h"

/* As live_reshard, GPU r of the cluster played by local device r.
 * NR_EINPUT when the machine has fewer GPUs than the cluster; NR_EIO when
 * no GPU is present, when built without NCCL, or when CUDA or NCCL
 * fails. */
int live_reshard_nccl(const struct env *v, const struct plan *a, const struct plan *b,
		      const char *src_store, const char *verify_store, struct exec_stats *st,
		      struct err *e);

#endif
