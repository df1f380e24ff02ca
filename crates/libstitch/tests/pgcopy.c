/*
 * A program crash-tested through a recording mount by
 * crates/cli/tests/control.rs (`stitchfs crashtest --workload-script`):
 * the paper's "copy, then remove the original" with libstitch's
 * patchgroups, or plainly (the control).
 *
 *   pgcopy workload pg|plain    in the mount's root: four files made
 *                               durable ("ready"), then each copied and
 *                               its original removed, the removal in a
 *                               group depending on the copy's (pg), or
 *                               with nothing between them (plain)
 *   pgcopy check                in a recovered image's root: once
 *                               "ready" was promised, each file is whole
 *                               as the original or as the copy
 *
 * The checker exits 1 after printing "order: ..." for a file lost both
 * ways, 0 otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stitch.h>

#define FILES 4

/* File i's bytes: a few blocks, different per file. */
static size_t content(int i, char *buf, size_t cap)
{
	size_t n = 0;
	for (int k = 0; k < 500 + 200 * i; k++)
		n += snprintf(buf + n, cap - n, "file %d line %d\n", i, k);
	return n;
}

static int put(const char *name, const char *data, size_t n)
{
	int f = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (f < 0 || write(f, data, n) != (ssize_t)n)
		return -1;
	return close(f);
}

static int same(const char *name, const char *want, size_t n)
{
	static char got[1 << 17];
	int f = open(name, O_RDONLY);
	if (f < 0)
		return 0;
	ssize_t r = read(f, got, sizeof got);
	close(f);
	return r == (ssize_t)n && memcmp(got, want, n) == 0;
}

static int die(const char *what)
{
	fprintf(stderr, "%s: %s\n", what, stitch_strerror(errno));
	return 2;
}

static int workload(int pg)
{
	static char buf[1 << 17];
	char name[32], copy[32];
	for (int i = 1; i <= FILES; i++) {
		snprintf(name, sizeof name, "big%d", i);
		if (put(name, buf, content(i, buf, sizeof buf)))
			return die("writing an original");
	}
	if (stitch_sync() < 0)
		return die("stitch_sync");
	printf("ready\n");
	fflush(stdout);
	for (int i = 1; i <= FILES; i++) {
		snprintf(name, sizeof name, "big%d", i);
		snprintf(copy, sizeof copy, "big%d.copy", i);
		size_t n = content(i, buf, sizeof buf);
		pg_t p = 0, q = 0;
		if (pg && ((p = pg_create()) < 0 || pg_engage(p) < 0))
			return die("the copy's group");
		if (put(copy, buf, n))
			return die("writing a copy");
		if (pg && (pg_disengage(p) < 0 || (q = pg_create()) < 0 ||
			   pg_depend(q, p) < 0 || pg_engage(q) < 0))
			return die("the removal's group");
		if (unlink(name) < 0)
			return die("unlink");
		if (pg && (pg_disengage(q) < 0 || pg_close(p) < 0 || pg_close(q) < 0))
			return die("closing the groups");
		printf("moved %d\n", i);
		fflush(stdout);
	}
	return 0;
}

static int check(void)
{
	static char buf[1 << 17];
	char name[32], copy[32], line[64];
	int ready = 0;
	FILE *p = fopen(getenv("STITCH_PROMISES"), "r");
	while (p && fgets(line, sizeof line, p))
		ready |= strcmp(line, "ready\n") == 0;
	if (p)
		fclose(p);
	if (!ready)
		return 0;
	for (int i = 1; i <= FILES; i++) {
		snprintf(name, sizeof name, "big%d", i);
		snprintf(copy, sizeof copy, "big%d.copy", i);
		size_t n = content(i, buf, sizeof buf);
		if (!same(name, buf, n) && !same(copy, buf, n)) {
			printf("order: %s is gone and %s is not whole\n", name, copy);
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "workload") == 0)
		return workload(strcmp(argv[2], "pg") == 0);
	if (argc == 2 && strcmp(argv[1], "check") == 0)
		return check();
	fprintf(stderr, "usage: pgcopy workload pg|plain | pgcopy check\n");
	return 2;
}
