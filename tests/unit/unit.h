/* The unit-test runner: one binary per tests/unit/test_*.c, TAP-like output.
 * A test is a void function; CHECK records a failure and carries on, so one
 * run shows every broken invariant. */
#ifndef NEREUS_UNIT_H
#define NEREUS_UNIT_H
#include <math.h>
#include <stdio.h>

static int unit_failed;

#define CHECK(cond) do { \
	if (!(cond)) { \
		printf("#   %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
		unit_failed = 1; \
	} \
} while (0)

/* Relative closeness, for formula checks against hand-computed values. */
#define CHECK_NEAR(a, b, rel) do { \
	double a_ = (a), b_ = (b); \
	if (!(fabs(a_ - b_) <= (rel) * fmax(fabs(a_), fabs(b_)) + 1e-300)) { \
		printf("#   %s:%d: %s = %.9g, expected %.9g\n", __FILE__, __LINE__, #a, a_, b_); \
		unit_failed = 1; \
	} \
} while (0)

static int unit_n, unit_bad;

#define RUN(fn) do { \
	unit_failed = 0; \
	fn(); \
	unit_n++; \
	if (unit_failed) { unit_bad++; printf("not ok %d - %s\n", unit_n, #fn); } \
	else printf("ok %d - %s\n", unit_n, #fn); \
} while (0)

#define UNIT_END() (printf("1..%d\n", unit_n), unit_bad ? 1 : 0)

#endif
