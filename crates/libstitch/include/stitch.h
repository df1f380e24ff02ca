/*
 * stitch.h — the control interface of a stitchfs mount (libstitch).
 *
 * Every call returns -1 and sets errno on error; stitch_strerror() says
 * what an errno means from these calls. The plain calls act on the
 * stitchfs mount of the path in $STITCHFS_MOUNT, or of the current
 * directory; the _at variants on the mount holding the open file or
 * directory `fd`. On a file system that is not stitchfs they fail with
 * ENOTTY.
 *
 * Link with -lstitch (pkg-config --cflags --libs stitch).
 */
#ifndef STITCH_H
#define STITCH_H

#ifdef __cplusplus
extern "C" {
#endif

/* The API version this header describes. */
#define STITCH_API_VERSION 1

/* The ioctls underneath (FUSE restricted ioctls, type 0xF5). */
#define STITCH_IOC_SYNC 0x0000F501u    /* _IO(0xF5, 1) */
#define STITCH_IOC_VERSION 0x8008F502u /* _IOR(0xF5, 2, struct stitch_version) */

struct stitch_version {
	unsigned int api;   /* the API version the server speaks */
	unsigned int flags; /* reserved, 0 */
};

/* The API version the mount's server speaks (>= 1), or -1. */
int stitch_version(void);
int stitch_version_at(int fd);

/* Makes everything the mount holds durable (sync(2) does not reach FUSE
 * servers). Returns 0 once it is, or -1. */
int stitch_sync(void);
int stitch_sync_at(int fd);

/* What errno `err` means after one of these calls (a static string). */
const char *stitch_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* STITCH_H */
