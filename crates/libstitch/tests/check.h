/*
 * What the libstitch test programs share: CHECK, which counts a failed
 * condition in `fails` and says where, and refused(), which expects a
 * call to fail with one errno and prints the library's message for it.
 */
#ifndef STITCH_TEST_CHECK_H
#define STITCH_TEST_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <stitch.h>

static int fails;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__,        \
				__LINE__, #cond);                              \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			fails++;                                               \
		}                                                              \
	} while (0)

/* A call expected to fail with `want`, its message as the library says. */
static inline void refused(int rc, int want, const char *what)
{
	int e = errno;
	CHECK(rc == -1 && e == want, "%s: rc %d errno %d (%s), want %d", what,
	      rc, e, strerror(e), want);
	printf("%s: %s\n", what, stitch_strerror(e));
	fflush(stdout); /* children end with _exit */
}

#endif
