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

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The API version this header describes (2: contexts, 3: streams,
 * 4: stats, 5: patchgroups, 6: external synchrony). */
#define STITCH_API_VERSION 6

/* The ioctls underneath (FUSE restricted ioctls, type 0xF5). */
#define STITCH_IOC_SYNC 0x0000F501u    /* _IO(0xF5, 1) */
#define STITCH_IOC_VERSION 0x8008F502u /* _IOR(0xF5, 2, struct stitch_version) */
#define STITCH_IOC_CONTEXT 0xC038F503u /* _IOWR(0xF5, 3, struct stitch_context) */
#define STITCH_IOC_SET_TAG 0x4010F504u /* _IOW(0xF5, 4, struct stitch_tag) */
#define STITCH_IOC_SET_STREAM 0x4050F505u /* _IOW(0xF5, 5, struct stitch_stream) */
#define STITCH_IOC_GET_STREAM 0xC050F506u /* _IOWR(0xF5, 6, struct stitch_stream) */
#define STITCH_IOC_STREAM_SYNC 0x4008F507u /* _IOW(0xF5, 7, struct stitch_call) */
#define STITCH_IOC_STATS 0xFE88F508u /* _IOWR(0xF5, 8, struct stitch_text) */
#define STITCH_IOC_GRAPH 0xFE88F509u /* _IOWR(0xF5, 9, struct stitch_text) */
#define STITCH_IOC_PATCHGROUP 0xC018F50Au /* _IOWR(0xF5, 10, struct stitch_group) */
#define STITCH_IOC_XSYNC 0xC028F50Bu /* _IOWR(0xF5, 11, struct stitch_xsync) */

/* A patchgroup call (the pg_* functions below fill it). */
#define STITCH_PG_CREATE 1u
#define STITCH_PG_DEPEND 2u
#define STITCH_PG_ENGAGE 3u
#define STITCH_PG_DISENGAGE 4u
#define STITCH_PG_SYNC 5u
#define STITCH_PG_CLOSE 6u
struct stitch_group {
	uint32_t version; /* in: STITCH_API_VERSION */
	uint32_t op;      /* in: STITCH_PG_* */
	uint64_t group;   /* in: the group; out (create): the new group */
	uint64_t on;      /* in (depend): the group `group` depends on */
};

/* An external-synchrony call (what `stitchfs xsync` sends): join a group
 * (0: a new one), commit it (every change it made so far, durable), leave
 * it. Members' fsyncs return at once; their output is the caller's to
 * hold until a commit returns. */
#define STITCH_XS_JOIN 1u
#define STITCH_XS_COMMIT 2u
#define STITCH_XS_LEAVE 3u
struct stitch_xsync {
	uint32_t version;     /* in: STITCH_API_VERSION */
	uint32_t op;          /* in: STITCH_XS_* */
	uint64_t group;       /* in (join): the group, 0 for new; out: the caller's */
	uint64_t held_bytes;  /* in (commit): output the caller holds, for figures */
	uint64_t held_chunks; /* in (commit): the same, in chunks */
	uint64_t result;      /* out (commit): 1 if it flushed, 0 if durable already */
};

/* A text answer: the mount's figures as one JSON object (field names:
 * docs/stats.md), or its live patch graph as Graphviz DOT. The caller
 * sets version, the server fills len and text. */
#define STITCH_TEXT_MAX 16000
struct stitch_text {
	uint32_t version; /* in: STITCH_API_VERSION */
	uint32_t len;     /* out: bytes of text used */
	char text[STITCH_TEXT_MAX]; /* out: UTF-8, not NUL-terminated */
};

struct stitch_version {
	unsigned int api;   /* the API version the server speaks */
	unsigned int flags; /* reserved, 0 */
};

/* A process's context on a mount: made when it first sets state, copied
 * to each child process when the mount first sees the child, kept across
 * exec, shared by its threads, closed when the process exits. */
#define STITCH_CONTEXT_HELD 1u      /* the process holds a context */
#define STITCH_CONTEXT_INHERITED 2u /* copied from from_pid/from_start */

struct stitch_context {
	uint32_t version;    /* in: STITCH_API_VERSION (the library fills it) */
	uint32_t flags;      /* out: STITCH_CONTEXT_* */
	uint64_t id;         /* in: 0 for one's own, else a context's number;
	                        out: the context's number (0: none held) */
	uint32_t pid;        /* out: the process */
	uint32_t tid;        /* out: the calling thread (own context only) */
	uint64_t start;      /* out: the process's start time (clock ticks
	                        after boot, /proc/PID/stat field 22) */
	uint32_t uid;        /* out: the user owning the context */
	uint32_t from_pid;   /* out: the process it was copied from, or 0 */
	uint64_t from_start; /* out: that process's start time */
	uint64_t tag;        /* out: the context's tag */
};

struct stitch_tag {
	uint32_t version; /* STITCH_API_VERSION (the library fills it) */
	uint32_t flags;   /* reserved, 0 */
	uint64_t tag;
};

/* Streams ("Consistency Without Ordering"): the disk holds a prefix of
 * each stream's changes; two streams are ordered only where their
 * changes are related (the same file, the same name, a directory and an
 * entry in it). A thread joins one by name; threads and child processes
 * started after take it. */
#define STITCH_STREAM_NAME_MAX 63
#define STITCH_IGNORE_FSYNC 1u /* fsync, fdatasync and O_SYNC only order */

struct stitch_stream {
	uint32_t version; /* in: STITCH_API_VERSION (the library fills it) */
	uint32_t flags;   /* STITCH_IGNORE_FSYNC */
	uint64_t id;      /* out: the stream's number on the mount (0: none) */
	char name[64];    /* NUL-terminated; empty: no stream */
};

struct stitch_call {
	uint32_t version; /* STITCH_API_VERSION (the library fills it) */
	uint32_t flags;   /* reserved, 0 */
};

/* Puts the calling thread in the stream `name` (made if new; NULL or ""
 * leaves any stream), with flags STITCH_IGNORE_FSYNC or 0. Returns 0, or
 * -1: ENAMETOOLONG for a name over STITCH_STREAM_NAME_MAX bytes, EPERM
 * for a stream another user made, EAGAIN at the mount's bound on streams
 * or on threads with a stream of their own in one process. */
int setstream(const char *name, unsigned int flags);
int setstream_at(int fd, const char *name, unsigned int flags);

/* The calling thread's stream into *out (an empty name for none).
 * Returns 0, or -1. */
int getstream(struct stitch_stream *out);
int getstream_at(int fd, struct stitch_stream *out);

/* Makes every change of the calling thread's stream durable. Returns 0
 * once it is, or -1: EINVAL if the thread is in no stream. */
int streamsync(void);
int streamsync_at(int fd);

/* Patchgroups ("Generalized File System Dependencies", SOSP 2007): a
 * process engages a group, and every change it makes while engaged
 * belongs to the group. pg_depend(Q, P): if any change of Q is on disk
 * after a crash, every change of P (and of what P depends on) is too.
 * A group's dependencies are added before it is first engaged; once
 * another group depends on it, it is sealed and never engaged again.
 * Groups are held like file descriptors: shared by a process's threads,
 * copied to a child process (engaged as in the parent), kept across
 * exec, let go at pg_close or exit. A process names only groups it holds.
 * Each returns 0 (pg_create: the new group, > 0) or -1 with errno:
 * EBADF for a group the process does not hold, EPERM for another user's,
 * EINVAL for a call the rules forbid, EBUSY for a dependency on a group
 * some process has engaged, EAGAIN at the mount's bounds. */
typedef int64_t pg_t;
pg_t pg_create(void);
pg_t pg_create_at(int fd);
int pg_depend(pg_t q, pg_t p);
int pg_depend_at(int fd, pg_t q, pg_t p);
int pg_engage(pg_t g);
int pg_engage_at(int fd, pg_t g);
int pg_disengage(pg_t g);
int pg_disengage_at(int fd, pg_t g);
/* Makes g and what it depends on durable (and nothing else). */
int pg_sync(pg_t g);
int pg_sync_at(int fd, pg_t g);
int pg_close(pg_t g);
int pg_close_at(int fd, pg_t g);

/* The API version the mount's server speaks (>= 1), or -1. */
int stitch_version(void);
int stitch_version_at(int fd);

/* Makes everything the mount holds durable (sync(2) does not reach FUSE
 * servers). Returns 0 once it is, or -1. */
int stitch_sync(void);
int stitch_sync_at(int fd);

/* Fills *out with the calling process's context (id 0) or with the
 * context numbered id. Returns 0, or -1: EBADF for a number naming no
 * context (never made, or its process exited), EPERM for another user's. */
int stitch_context(uint64_t id, struct stitch_context *out);
int stitch_context_at(int fd, uint64_t id, struct stitch_context *out);

/* Gives the calling process a context (inherited from its nearest
 * ancestor holding one, if it has none) and sets its tag. Returns 0, or
 * -1: EAGAIN when the mount's bound on contexts is reached. */
int stitch_set_tag(uint64_t tag);
int stitch_set_tag_at(int fd, uint64_t tag);

/* Makes the calling process a child subreaper (prctl
 * PR_SET_CHILD_SUBREAPER): an orphaned descendant is adopted by it, not
 * by init, and so still inherits from the family. For programs that
 * start others. Returns 0, or -1. */
int stitch_subreaper(void);

/* What errno `err` means after one of these calls (a static string). */
const char *stitch_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* STITCH_H */
