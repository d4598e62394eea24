/* Plans for people: a text table and an SVG timeline of GPU pools ×
 * stages, coloured by model. */
#ifndef NEREUS_RENDER_H
#define NEREUS_RENDER_H

#include "common/text.h"
#include "plan/decide.h"

/* Append the GPUs of pool to b, exactly as ranges: "0-7,16-31". */
void plan_pool_gpus(struct sbuf *b, const struct cluster *cl, const struct plan *p, int pool);
/* The table as a malloc'd string, its columns as wide as their longest
 * value; d may be NULL. */
char *plan_table(const struct env *v, const struct plan *p, const struct decision *d);
/* The timeline as SVG, written to file as out.h says; every name in it
 * XML-escaped. */
int plan_svg(const struct env *v, const struct plan *p, const char *file, struct err *e);

#endif
