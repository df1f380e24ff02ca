/*
 * Streams through libstitch on a real mount (run as root by
 * crates/cli/tests/control.rs): join, ask, sync and leave; a thread and
 * a child process take the stream of their parent; a name too long
 * (ENAMETOOLONG), a stream sync in no stream (EINVAL), another user's
 * stream (EPERM). Prints "c streams ok".
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stitch.h>

#define CHECK(cond)                                                      \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "%s:%d: %s (errno %d: %s)\n", __FILE__, \
				__LINE__, #cond, errno, stitch_strerror(errno)); \
			exit(1);                                         \
		}                                                        \
	} while (0)

static char thread_saw[64];

static void *thread_main(void *arg)
{
	struct stitch_stream s;
	(void)arg;
	if (getstream(&s) == 0)
		strcpy(thread_saw, s.name);
	return NULL;
}

int main(void)
{
	struct stitch_stream s;
	char name[80];

	CHECK(getstream(&s) == 0 && s.id == 0 && s.name[0] == 0);
	CHECK(streamsync() == -1 && errno == EINVAL);
	memset(name, 'n', 64);
	name[64] = 0;
	CHECK(setstream(name, 0) == -1 && errno == ENAMETOOLONG);

	CHECK(setstream("build", STITCH_IGNORE_FSYNC) == 0);
	CHECK(getstream(&s) == 0 && strcmp(s.name, "build") == 0 && s.id > 0);
	CHECK(s.flags == STITCH_IGNORE_FSYNC);
	CHECK(streamsync() == 0);

	pthread_t t;
	CHECK(pthread_create(&t, NULL, thread_main, NULL) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(strcmp(thread_saw, "build") == 0);

	pid_t pid = fork();
	if (pid == 0) {
		struct stitch_stream c;
		_exit(getstream(&c) == 0 && strcmp(c.name, "build") == 0 ? 0 : 1);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

	pid = fork();
	if (pid == 0) {
		if (setgid(65534) != 0 || setuid(65534) != 0)
			_exit(2);
		_exit(setstream("build", 0) == -1 && errno == EPERM ? 0 : 1);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

	CHECK(setstream(NULL, 0) == 0);
	CHECK(getstream(&s) == 0 && s.id == 0);
	printf("c streams ok\n");
	return 0;
}
