/*
 * Contexts through libstitch on a real stitchfs mount, run by
 * crates/cli/tests/control.rs as root:
 *
 *   contexts MOUNT FOREIGN_DIR
 *   contexts --bound MOUNT      (a mount of --contexts 2)
 *
 * Every call goes through a descriptor of MOUNT, a directory. Checks what
 * a process, a child, a thread and a program after exec see, and every
 * misuse errno with its message: an unknown and a closed context
 * (EBADF), another user's (EPERM, as user nobody and back), a structure
 * of another size or version (EINVAL), a file system that is not
 * stitchfs (ENOTTY). Prints "c ok" and exits 0 when all hold; otherwise
 * says which check failed and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stitch.h>

#include "check.h"

static struct stitch_context mine(int fd)
{
	struct stitch_context c;
	memset(&c, 0xff, sizeof c);
	int rc = stitch_context_at(fd, 0, &c);
	CHECK(rc == 0, "context: %s", stitch_strerror(errno));
	return c;
}

struct seen {
	struct stitch_context c;
	pid_t tid;
};

static void *in_thread(void *arg)
{
	int fd = *(int *)arg;
	static struct seen s;
	s.c = mine(fd);
	s.tid = (pid_t)syscall(SYS_gettid);
	CHECK(stitch_set_tag_at(fd, 12) == 0, "set_tag in a thread");
	return &s;
}

/* Where a child writes its answer. */
static int answer_fd = -1;

/* Runs `f` in a child process that writes one uint64 back; returns it. */
static uint64_t in_child(int fd, uint64_t (*f)(int fd))
{
	int p[2];
	if (pipe(p) != 0) {
		perror("pipe");
		exit(2);
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		answer_fd = p[1];
		uint64_t v = f(fd);
		if (write(p[1], &v, sizeof v) != sizeof v)
			_exit(2);
		_exit(fails ? 1 : 0);
	}
	close(p[1]);
	uint64_t v = 0;
	CHECK(read(p[0], &v, sizeof v) == sizeof v, "no answer from a child");
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a child failed: %d", st);
	return v;
}

static uint64_t parent_id;

/* A child: inherits its parent's tag, and its copy is its own. */
static uint64_t child_inherits(int fd)
{
	struct stitch_context c = mine(fd);
	CHECK(c.flags == (STITCH_CONTEXT_HELD | STITCH_CONTEXT_INHERITED),
	      "flags %u", c.flags);
	CHECK(c.pid == (uint32_t)getpid() && c.from_pid == (uint32_t)getppid(),
	      "pid %u from %u", c.pid, c.from_pid);
	CHECK(c.tag == 7 && c.id != parent_id, "tag %llu id %llu",
	      (unsigned long long)c.tag, (unsigned long long)c.id);
	CHECK(stitch_set_tag_at(fd, 8) == 0, "set_tag in a child");
	return c.id;
}

/* A child that sets its own tag and execs this program again, which
 * answers for it (`--after-exec`). */
static uint64_t child_execs(int fd)
{
	CHECK(stitch_set_tag_at(fd, 11) == 0, "set_tag before exec");
	char args[3][24];
	snprintf(args[0], sizeof args[0], "%d", fd);
	snprintf(args[1], sizeof args[1], "%d", answer_fd);
	snprintf(args[2], sizeof args[2], "%llu",
		 (unsigned long long)mine(fd).id);
	execl("/proc/self/exe", "contexts", "--after-exec", args[0], args[1],
	      args[2], (char *)0);
	perror("exec");
	_exit(2);
}

/* The program a child exec'd: the context it held came along. */
static int after_exec(int fd, int answer, uint64_t id)
{
	struct stitch_context c = mine(fd);
	CHECK(c.tag == 11 && c.id == id && c.pid == (uint32_t)getpid(),
	      "after exec: tag %llu id %llu (was %llu)",
	      (unsigned long long)c.tag, (unsigned long long)c.id,
	      (unsigned long long)id);
	if (write(answer, &c.id, sizeof c.id) != sizeof c.id)
		return 2;
	return fails ? 1 : 0;
}

/* As user nobody: the parent's context is another user's. */
static uint64_t child_as_nobody(int fd)
{
	if (setgroups(0, NULL) || setgid(65534) || setuid(65534)) {
		perror("becoming nobody");
		_exit(2);
	}
	struct stitch_context c;
	refused(stitch_context_at(fd, parent_id, &c), EPERM,
		"another user's context");
	/* Its own: inherited, owned by nobody. */
	c = mine(fd);
	CHECK(c.uid == 65534 && c.tag == 7 && (c.flags & STITCH_CONTEXT_INHERITED),
	      "nobody's own: uid %u tag %llu", c.uid, (unsigned long long)c.tag);
	return c.id;
}

/* On a mount bounded to two contexts: this process holds one, a child
 * the other; a second child is refused EAGAIN until the first exits. */
static int bound(int fd)
{
	CHECK(stitch_set_tag_at(fd, 1) == 0, "set_tag");
	int p[2], q[2];
	if (pipe(p) || pipe(q))
		return 2;
	pid_t a = fork();
	if (a == 0) {
		struct stitch_context c = mine(fd); /* inherits: the second */
		char go;
		if (write(p[1], "x", 1) != 1 || read(q[0], &go, 1) != 1)
			_exit(2);
		_exit(c.flags & STITCH_CONTEXT_INHERITED ? 0 : 1);
	}
	char ready;
	CHECK(read(p[0], &ready, 1) == 1, "no word from the first child");
	for (int round = 0; round < 2; round++) {
		pid_t b = fork();
		if (b == 0) {
			int rc = stitch_set_tag_at(fd, 2);
			if (round == 0) {
				refused(rc, EAGAIN, "a third context");
				_exit(fails ? 1 : 0);
			}
			_exit(rc == 0 && mine(fd).tag == 2 ? 0 : 1);
		}
		int st;
		waitpid(b, &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %d: %d",
		      round, st);
		if (round == 0) { /* the first child exits: room again */
			if (write(q[1], "x", 1) != 1)
				return 2;
			waitpid(a, &st, 0);
			CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a: %d", st);
		}
	}
	if (fails)
		return 1;
	printf("c bound ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--bound") == 0) {
		int fd = open(argv[2], O_RDONLY | O_DIRECTORY);
		return fd < 0 ? 2 : bound(fd);
	}
	if (argc == 5 && strcmp(argv[1], "--after-exec") == 0)
		return after_exec(atoi(argv[2]), atoi(argv[3]),
				  strtoull(argv[4], NULL, 10));
	if (argc != 3) {
		fprintf(stderr, "usage: contexts MOUNT FOREIGN_DIR\n");
		return 2;
	}
	int fd = open(argv[1], O_RDONLY | O_DIRECTORY);
	if (fd < 0) {
		perror(argv[1]);
		return 2;
	}
	CHECK(stitch_version_at(fd) == STITCH_API_VERSION, "version");

	/* Nothing held yet: who is calling, still. */
	struct stitch_context c = mine(fd);
	CHECK(c.flags == 0 && c.id == 0 && c.pid == (uint32_t)getpid() &&
		      c.tid == (uint32_t)syscall(SYS_gettid) && c.start > 0,
	      "before any state: flags %u id %llu", c.flags,
	      (unsigned long long)c.id);

	CHECK(stitch_set_tag_at(fd, 7) == 0, "set_tag");
	c = mine(fd);
	CHECK(c.flags == STITCH_CONTEXT_HELD && c.tag == 7 && c.id != 0 &&
		      c.uid == 0,
	      "after set_tag: flags %u tag %llu", c.flags,
	      (unsigned long long)c.tag);
	parent_id = c.id;

	/* A child inherits, and what it sets stays its own. */
	uint64_t child_id = in_child(fd, child_inherits);
	CHECK(mine(fd).tag == 7, "the child's tag reached its parent");

	/* A closed context (its process exited) and one never made. */
	struct stitch_context other;
	refused(stitch_context_at(fd, child_id, &other), EBADF,
		"an exited process's context");
	refused(stitch_context_at(fd, 1u << 30, &other), EBADF,
		"an unknown context");
	CHECK(stitch_context_at(fd, parent_id, &other) == 0 &&
		      other.tag == 7 && other.tid == 0,
	      "one's own context by number");

	/* A thread shares its process's context. */
	pthread_t t;
	void *res;
	pthread_create(&t, NULL, in_thread, &fd);
	pthread_join(t, &res);
	struct seen *s = res;
	CHECK(s->c.id == parent_id && s->c.tag == 7 &&
		      s->c.tid == (uint32_t)s->tid &&
		      s->c.tid != (uint32_t)getpid(),
	      "a thread: id %llu tid %u", (unsigned long long)s->c.id,
	      s->c.tid);
	CHECK(mine(fd).tag == 12, "a thread's tag is its process's");
	CHECK(stitch_set_tag_at(fd, 7) == 0, "set_tag");

	/* exec keeps the context. */
	CHECK(in_child(fd, child_execs) != 0, "no context after exec");

	/* Another user never reads this user's context, nor this one its. */
	uint64_t nobody_id = 0;
	{
		int p[2], q[2];
		if (pipe(p) || pipe(q))
			return 2;
		pid_t pid = fork();
		if (pid == 0) {
			close(p[0]);
			close(q[1]);
			uint64_t id = child_as_nobody(fd);
			if (write(p[1], &id, sizeof id) != sizeof id)
				_exit(2);
			char go;
			/* Alive until the parent has asked. */
			if (read(q[0], &go, 1) != 1)
				_exit(2);
			_exit(fails ? 1 : 0);
		}
		close(p[1]);
		close(q[0]);
		CHECK(read(p[0], &nobody_id, sizeof nobody_id) ==
			      sizeof nobody_id,
		      "no answer from nobody");
		refused(stitch_context_at(fd, nobody_id, &other), EPERM,
			"user nobody's context, asked by root");
		if (write(q[1], "x", 1) != 1)
			return 2;
		int st;
		waitpid(pid, &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody: %d", st);
	}

	/* Structures of another size or version, sent underneath. */
	struct {
		struct stitch_context c;
		uint64_t extra;
	} big = {{.version = STITCH_API_VERSION}, 0};
	unsigned long wrong_size = (STITCH_IOC_CONTEXT & ~(0x3fffu << 16)) |
				   ((unsigned long)sizeof big << 16);
	refused(ioctl(fd, wrong_size, &big), EINVAL, "a context of 64 bytes");
	struct stitch_context v = {.version = STITCH_API_VERSION + 1};
	refused(ioctl(fd, STITCH_IOC_CONTEXT, &v), EINVAL,
		"a context of a newer version");
	v.version = 0;
	refused(ioctl(fd, STITCH_IOC_CONTEXT, &v), EINVAL,
		"a context of version 0");
	struct stitch_tag tag = {.version = STITCH_API_VERSION, .flags = 4};
	refused(ioctl(fd, STITCH_IOC_SET_TAG, &tag), EINVAL,
		"a tag with unknown flags");

	/* Not a stitchfs mount; a bad descriptor. */
	int foreign = open(argv[2], O_RDONLY | O_DIRECTORY);
	refused(stitch_context_at(foreign, 0, &other), ENOTTY,
		"a file system that is not stitchfs");
	refused(stitch_set_tag_at(foreign, 1), ENOTTY,
		"set_tag off stitchfs");
	close(foreign);
	refused(stitch_context_at(-1, 0, &other), EBADF, "no descriptor");

	close(fd);
	if (fails) {
		fprintf(stderr, "%d checks failed\n", fails);
		return 1;
	}
	printf("c ok\n");
	return 0;
}
