/* The names documents give a model-stage's recompute and ZeRO settings
 * (nereus-plan(5), nereus-steps(5)). */
#include "doc/pconf.h"

#include <stddef.h>

const char *const pconf_recompute_names[NRECOMPUTE + 1] = { "none", "selective", "full", NULL };
const char *const pconf_zero_names[NZERO_STAGES + 1] = { "zero0", "zero1", "zero2", "zero3", NULL };
