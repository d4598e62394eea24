/* What the store's source files share and the public header does not
 * show: the copy engine, opened stores, and the work directory that every
 * output is built in. */
#ifndef NEREUS_STORE_IMPL_H
#define NEREUS_STORE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mem.h"
#include "state/safetensors.h"
#include "state/store.h"

/* --- the copy engine (store_xfer.c) ------------------------------------------ */

/* A file pieces are read from or written to. */
struct xfile {
	char *path;                /* where it is */
	char *show;                /* how messages name it */
	int fd;                    /* -1 while closed */
	size_t left;               /* pieces not yet read or written; closed at 0 */
	/* destination files only: */
	char *hdr;                 /* the length prefix and header */
	size_t hlen;
	size_t first, n;           /* its pieces: dst[first .. first + n) */
};

/* A piece of a global tensor in a file.  Pieces meet only within one
 * group (a model's tensor); a destination piece takes the elements of the
 * source pieces of its group whose kind is its src_kind. */
struct xpiece {
	int group;
	int kind;                  /* its state kind */
	int src_kind;              /* source: its kind; destination: the kind it copies,
				    * or -1 to be zero-filled */
	struct box box;
	int file;
	uint64_t offset;           /* of its data in its file */
	enum st_dtype dtype;       /* a source of another dtype is widened to it */
	char name[LAYOUT_NAME_MAX]; /* in its file */
	int ndim;                  /* its shape in its file (the box's for shards) */
	uint64_t shape[BOX_MAXDIM];
	bool has_sum;              /* source: whether sum is known; destination: set when written */
	uint64_t sum;              /* XXH3-64 of its data */
	size_t id;                 /* the caller's index for it */
	/* the engine's: */
	int need;                  /* source pieces still to copy in */
	void *buf;
	size_t cap;                /* buf's size */
};

struct xfer {
	struct xfile *sf, *df;
	size_t nsf, ndf, capsf, capdf;
	struct xpiece *src, *dst;
	size_t nsrc, ndst, capsrc, capdst;
	const struct store_opts *o;
};

/* Add a source file; its index, or -1 when out of memory. */
int xfer_src_file(struct xfer *x, const char *path, const char *show);
/* Append a piece; NULL when out of memory. */
struct xpiece *xfer_src(struct xfer *x);
struct xpiece *xfer_dst(struct xfer *x);
/* Make the pieces dst[first..ndst) a destination file: their offsets follow
 * its header, which is hdr[0..hlen) when hdr is not NULL (the caller's
 * checked verbatim copy) or else built from the pieces in their order with
 * metadata meta. */
int xfer_dst_file(struct xfer *x, const char *path, const char *show, size_t first,
		  const char *hdr, size_t hlen, const struct st_meta *meta, size_t nmeta,
		  struct err *e);
/* Copy everything: read each source piece once, check its sum, fill and
 * write each destination piece once, sync each file, read it back and
 * check it.  dst pieces' sum is set. */
int xfer_run(struct xfer *x, struct err *e);
void xfer_free(struct xfer *x);

/* Read exactly len bytes at off of fd, or fail naming show. */
int store_xread(int fd, const char *show, void *buf, size_t len, uint64_t off, struct err *e);

/* --- stores on disk (store.c) --------------------------------------------------- */

/* An output under construction: dir is .BASE.tmp.XXXXXX beside dst (BASE
 * its name), locked while we live; out is the tree being built in it. */
struct work {
	char *dst;
	char *dir;
	char *out;                 /* dir/out */
	int lock;                  /* fd holding the lock on dir */
	bool archive, zstd;        /* the output is a tar archive, compressed */
	const struct store_opts *o;
};

/* Refuse an existing dst, remove what killed runs left beside it, and
 * make the work directory.  archive_ok: a name ending in .tar, .tar.zst
 * or .tzst makes an archive. */
int store_work_begin(struct work *w, const char *dst, bool archive_ok, const struct store_opts *o,
	       struct err *e);
/* Sync the tree, pack it when dst is an archive, and rename it to dst. */
int store_work_commit(struct work *w, struct err *e);
/* Remove the work directory and everything in it. */
void store_work_end(struct work *w);
/* Make the folders of rel (a path relative to w->out). */
int store_work_mkdirs(const struct work *w, const char *rel, struct err *e);
/* Write buf as w->out/rel (folders made), synced. */
int store_work_write(const struct work *w, const char *rel, const void *buf, size_t len,
	       struct err *e);

/* A store opened for reading; an archive is extracted into w->dir/src. */
struct store {
	char *name;                /* as the caller named it */
	char *root;                /* the directory holding manifest.json */
	bool archive;
	struct manifest m;
};

/* Open and check src: the manifest, every shard's header against it, and
 * that every aux file is there.  An archive is extracted into w; with w
 * NULL, only a directory opens (NR_EINPUT for an archive). */
int store_open(struct store *s, const char *src, struct work *w, struct err *e);
void store_close(struct store *s);
/* How messages name the file rel of s. */
void store_show(const struct store *s, const char *rel, char *out, size_t n);
/* Whether path's name says archive, and compressed. */
bool store_is_archive_name(const char *path, bool *zstd);
/* Read a whole file; messages call it show. */
int store_read_whole(const char *path, const char *show, char **buf, size_t *len, struct err *e);

/* Add the source pieces of kind of model mi of s to x. */
int store_add_src(struct xfer *x, const struct store *s, int mi, enum state_kind kind,
		  int group_base, struct err *e);
/* Add the destination shards of model mi of m (all its kinds) in w: kind
 * k is copied from the source's kind k when src_has[k], else made as Adam
 * starts (master from the weights, m and v zero).  The pieces are appended
 * to m's (capacity *mcap), the engine's pieces carry their index. */
int store_add_dst(struct xfer *x, struct work *w, struct manifest *m, size_t *mcap, int mi,
		  const bool src_has[NKINDS], int group_base, struct err *e);
/* Read aux file rel of s whole, checked against the manifest. */
int store_read_aux(const struct store *s, const char *rel, char **buf, size_t *len,
		   struct err *e);
/* Copy every aux file of s into w (checking each) and record them in m. */
int store_copy_aux(const struct store *s, struct work *w, struct manifest *m, struct err *e);
/* Write buf as aux file rel of the store in w, recorded in m. */
int store_add_aux(struct work *w, struct manifest *m, const char *rel, const void *buf,
		  size_t len, struct err *e);
/* After xfer_run: the sums into m's pieces, and manifest.json into w. */
int store_finish(struct xfer *x, struct work *w, struct manifest *m, struct err *e);
/* Model mi of m takes layout lo (layout_init); NR_EINPUT naming it. */
int store_set_layout(struct manifest *m, int mi, const struct store_layout *lo,
		     struct err *e);
/* Check that path is a relative path of [A-Za-z0-9._-] components, none
 * "." or "..". */
bool store_path_ok(const char *path);

/* Deep-copy what from brought from its checkpoint (its Hugging Face
 * origin and per-tensor dtypes) into to, a model of the same
 * architecture (store_manifest.c). */
int mmodel_copy_origin(struct mmodel *to, const struct mmodel *from);
/* Deep-copy from's Hugging Face origin alone (the names of its kept
 * config.json, index, file headers and extra files) into to, a model of
 * the same architecture (part of mmodel_copy_origin). */
int mmodel_copy_hf(struct mmodel *to, const struct mmodel *from);

/* --- archives (store_tar.c) ------------------------------------------------------ */

/* Extract the regular files of archive path into dir (made here). */
int tar_extract(const char *path, const char *dir, const struct store_opts *o,
		struct err *e);
/* Read member name of archive path whole. */
int tar_read_member(const char *path, const char *name, char **buf, size_t *len,
		    struct err *e);
/* Write the tree dir as archive file out: manifest.json first, then the
 * rest in name order; zstd-compressed when zstd.  Synced. */
int tar_pack(const char *dir, const char *out, bool zstd, const struct store_opts *o,
	     struct err *e);

/* --- small helpers ---------------------------------------------------------------- */

char *store_strdup(const char *s);
/* "a/b" joined, malloc'd. */
char *store_path_join(const char *a, const char *b);
bool store_cancelled(const struct store_opts *o);
/* Whether to sync what is written (not when o says no_sync). */
bool store_syncing(const struct store_opts *o);
enum st_dtype arch_st_dtype(const struct arch *a);
/* Order of pieces by shard, then tensor (qsort_r over indices into the
 * pieces given as ctx), and whether two pieces share a shard. */
int manifest_by_shard(const void *pa, const void *pb, void *ctx);
bool manifest_same_shard(const struct mpiece *a, const struct mpiece *b);

#endif
