/* Plans for people: a text table and an SVG timeline of GPU pools ×
 * stages, coloured by model. */
#ifndef NEREUS_RENDER_H
#define NEREUS_RENDER_H

#include "plan/decide.h"

/* The table as a malloc'd string; d may be NULL. */
char *plan_table(const struct env *v, const struct plan *p, const struct decision *d);
int plan_svg(const struct env *v, const struct plan *p, const char *file, struct err *e);

#endif
