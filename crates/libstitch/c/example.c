/*
 * An example of libstitch: asks the stitchfs mount of PATH (default: the
 * current directory) for its API version, then makes everything it holds
 * durable. Build against an installed libstitch:
 *
 *   cc example.c $(pkg-config --cflags --libs stitch) -o stitch-example
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <stitch.h>

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : ".";
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		perror(path);
		return 2;
	}
	int v = stitch_version_at(fd);
	if (v < 0) {
		int e = errno;
		fprintf(stderr, "%s: %s\n", path, stitch_strerror(e));
		close(fd);
		return e == ENOTTY ? 3 : 1;
	}
	printf("stitchfs API version %d (this header: %d)\n", v, STITCH_API_VERSION);
	if (stitch_sync_at(fd) < 0) {
		fprintf(stderr, "%s: sync: %s\n", path, stitch_strerror(errno));
		close(fd);
		return 1;
	}
	printf("synced\n");
	close(fd);
	return 0;
}
