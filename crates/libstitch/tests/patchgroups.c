/*
 * Patchgroups through libstitch on a real stitchfs mount, run by
 * crates/cli/tests/patchgroups.rs as root:
 *
 *   patchgroups MOUNT
 *
 * Checks the life of a group as a program meets it: made, engaged around
 * writes, depended on (then sealed), synced, closed; held by a thread
 * other than the one that made it, copied to a child engaged as in the
 * parent, kept across exec, let go at a child's exit (a dependency on a
 * group a child had engaged waits for nothing once the child is gone);
 * and every misuse errno with its message: a sealed group engaged, a
 * dependency the rules forbid (on itself, from a group already engaged,
 * from a sealed one: EINVAL), a dependency on a group still engaged
 * (EBUSY), a closed, unknown or negative handle (EBADF), another user's
 * group (EPERM, a child turned user nobody), a group another process
 * holds (EBADF). Prints "c patchgroups ok" and exits 0 when all hold.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stitch.h>

#include "check.h"

static void put(int dir, const char *name, const char *text)
{
	int f = openat(dir, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(f >= 0, "creating %s: %s", name, strerror(errno));
	if (f < 0)
		return;
	CHECK(write(f, text, strlen(text)) == (ssize_t)strlen(text), "writing %s",
	      name);
	close(f);
}

/* Runs `f(fd, g)` in a child process; its exit status. */
static int in_child(int fd, pg_t g, int (*f)(int, pg_t))
{
	pid_t pid = fork();
	if (pid == 0)
		_exit(f(fd, g));
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

/* A child holds the group engaged as the parent had it: it can
 * disengage it (which a process that had not engaged it cannot). */
static int child_disengages(int fd, pg_t g)
{
	put(fd, "child", "written under the parent's group");
	return pg_disengage_at(fd, g) == 0 ? 0 : 1;
}

/* A child that stays with the group engaged until told, then exits. */
static int child_keeps_engaged(int fd, pg_t g)
{
	(void)g;
	put(fd, "kept", "x");
	return 0;
}

static int child_execs(int fd, pg_t g)
{
	char a[24], b[24];
	snprintf(a, sizeof a, "%d", fd);
	snprintf(b, sizeof b, "%lld", (long long)g);
	execl("/proc/self/exe", "patchgroups", "--after-exec", a, b, (char *)0);
	perror("exec");
	return 2;
}

/* After exec: the group is still held and engaged. */
static int after_exec(int fd, pg_t g)
{
	put(fd, "execd", "after exec");
	return pg_disengage_at(fd, g) == 0 ? 0 : 1;
}

static int child_as_nobody(int fd, pg_t g)
{
	if (setgroups(0, NULL) || setgid(65534) || setuid(65534)) {
		perror("becoming nobody");
		return 2;
	}
	/* Inherited, but root's: nobody may not use it. */
	refused(pg_engage_at(fd, g), EPERM, "root's group, engaged by nobody");
	refused(pg_sync_at(fd, g), EPERM, "root's group, synced by nobody");
	/* Nobody's own works. */
	pg_t mine = pg_create_at(fd);
	CHECK(mine > 0, "nobody's own group: %s", strerror(errno));
	CHECK(pg_engage_at(fd, mine) == 0 && pg_disengage_at(fd, mine) == 0,
	      "nobody engages its own");
	return fails ? 1 : 0;
}

/* A child's close is its own: the child no longer holds the group (a
 * process that does not hold a group cannot name it), its parent does. */
static int child_closes_then_uses(int fd, pg_t g)
{
	CHECK(pg_close_at(fd, g) == 0, "a child closes its copy");
	refused(pg_engage_at(fd, g), EBADF, "a group the child closed");
	return fails ? 1 : 0;
}

struct made {
	int fd;
	pg_t g;
};

static void *thread_makes(void *arg)
{
	struct made *m = arg;
	m->g = pg_create_at(m->fd);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--after-exec") == 0)
		return after_exec(atoi(argv[2]), atoll(argv[3]));
	if (argc != 2) {
		fprintf(stderr, "usage: patchgroups MOUNT\n");
		return 2;
	}
	int fd = open(argv[1], O_RDONLY | O_DIRECTORY);
	if (fd < 0) {
		perror(argv[1]);
		return 2;
	}
	CHECK(stitch_version_at(fd) >= 5, "API version %d", stitch_version_at(fd));

	/* A group made by another thread is the process's. */
	struct made m = {fd, 0};
	pthread_t t;
	pthread_create(&t, NULL, thread_makes, &m);
	pthread_join(t, NULL);
	pg_t p = m.g;
	CHECK(p > 0, "pg_create in a thread: %s", strerror(errno));
	CHECK(pg_engage_at(fd, p) == 0, "engaging a thread's group");
	put(fd, "out", "sorted");
	CHECK(pg_disengage_at(fd, p) == 0, "disengage");
	refused(pg_disengage_at(fd, p), EINVAL, "a group not engaged, disengaged");

	/* Dependencies and what they seal. */
	pg_t q = pg_create_at(fd);
	CHECK(q > p, "groups are numbered upward: %lld %lld", (long long)p,
	      (long long)q);
	refused(pg_depend_at(fd, q, q), EINVAL, "a group depending on itself");
	CHECK(pg_depend_at(fd, q, p) == 0, "depend: %s", strerror(errno));
	refused(pg_engage_at(fd, p), EINVAL, "a sealed group, engaged");
	refused(pg_depend_at(fd, p, q), EINVAL,
		"a dependency of a sealed group (a cycle)");
	CHECK(pg_engage_at(fd, q) == 0, "engaging the dependent");
	CHECK(unlinkat(fd, "out", 0) == 0, "unlink under q");
	pg_t r = pg_create_at(fd);
	refused(pg_depend_at(fd, q, r), EINVAL,
		"a dependency of a group already engaged");
	CHECK(pg_engage_at(fd, r) == 0, "engage r");
	pg_t s = pg_create_at(fd);
	refused(pg_depend_at(fd, s, r), EBUSY, "a dependency on an engaged group");
	CHECK(pg_disengage_at(fd, r) == 0 && pg_disengage_at(fd, q) == 0,
	      "disengage");
	CHECK(pg_depend_at(fd, s, r) == 0, "depend once disengaged");
	CHECK(pg_sync_at(fd, q) == 0, "pg_sync: %s", strerror(errno));
	CHECK(pg_sync_at(fd, s) == 0, "pg_sync of a group with no change");

	/* Fork: the child holds the groups, engaged as in the parent. */
	pg_t f = pg_create_at(fd);
	CHECK(pg_engage_at(fd, f) == 0, "engage f");
	CHECK(in_child(fd, f, child_disengages) == 0,
	      "a child did not hold f engaged");
	/* exec keeps them. */
	CHECK(in_child(fd, f, child_execs) == 0, "not held after exec");
	/* A child's exit lets go: f was engaged in children that exited. */
	CHECK(in_child(fd, f, child_keeps_engaged) == 0, "child");
	CHECK(pg_disengage_at(fd, f) == 0, "disengage f");
	pg_t after_f = pg_create_at(fd);
	CHECK(pg_depend_at(fd, after_f, f) == 0,
	      "a dependency on a group only exited children had engaged: %s",
	      strerror(errno));
	/* A child's close is its own. */
	pg_t c = pg_create_at(fd);
	CHECK(in_child(fd, c, child_closes_then_uses) == 0, "child close");
	CHECK(pg_engage_at(fd, c) == 0 && pg_disengage_at(fd, c) == 0,
	      "the parent still holds what a child closed");

	/* Another user, handles it inherited. */
	CHECK(in_child(fd, q, child_as_nobody) == 0, "nobody");

	/* Closed, unknown, negative. */
	CHECK(pg_close_at(fd, c) == 0, "close");
	refused(pg_engage_at(fd, c), EBADF, "a closed group");
	refused(pg_close_at(fd, c), EBADF, "a closed group, closed again");
	refused(pg_sync_at(fd, 1 << 30), EBADF, "a group never made");
	refused(pg_engage_at(fd, -1), EBADF, "a negative handle");
	refused(pg_create_at(-1), EBADF, "a bad descriptor");

	if (fails)
		return 1;
	printf("c patchgroups ok\n");
	return 0;
}
