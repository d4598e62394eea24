/* State stores: a job's model state at rest, as safetensors shards.
 *
 * A store is a directory, or a tar archive of one (optionally
 * zstd-compressed: the name ends in .tar, or in .tar.zst or .tzst), that
 * holds manifest.json and one safetensors file per model, state kind and
 * rank of the model's layout (layout.h):
 *
 *     actor/weight/pp00-tp01.safetensors        model-dtype weights
 *     actor/master/pp00-tp01.safetensors        fp32 master weights
 *     actor/adam_m/pp01-tp00-dp03.safetensors   Adam m, split across DP
 *     actor/hf/config.json                      what the Hugging Face import kept
 *
 * A shard holds only the pieces its rank owns (layout.h's pieces that are
 * not copies, with their padding tail dropped), each named by its global
 * tensor and shaped as its box, so every element of every global tensor
 * is stored exactly once; a kind that is not split across DP is stored
 * once per (pp, tp).
 *
 * manifest.json is a document {"nereus": 1, "kind": "manifest"} with
 *   "models": {NAME: {"arch": {layers, hidden, heads, kv_heads, ffn, vocab,
 *       tied_embeddings, dtype} as in a job, "layout": {tp, pp, dp, zero,
 *       trainable}, and after an import "hf": {"config", "index", "files":
 *       [{"name", "header", "tensors": [Hugging Face names in data order]}]}}},
 *   "aux_files": [{"path", "bytes", "xxh3"}]: what the store carries verbatim
 *       (a model's config.json, index and each file's header, kept so that
 *       export gives the checkpoint back bit for bit),
 *   "pieces": [{"model", "kind", "tensor", "box": {"off": [...], "ext": [...]},
 *       "dtype", "file", "byte_offset", "xxh3"}]: every piece, where its data
 *       start in its file and their XXH3-64 as 16 hex digits,
 *   "run" (optional): an object a run saved with its state, kept as it is.
 *
 * Resharding a store is box intersection: each destination piece is
 * filled from the source pieces of the same tensor that it overlaps.  The
 * functions below read every input completely (manifest, shard headers)
 * before they create anything, build their output under a temporary name
 * beside it (DST.tmp.XXXXXX, locked while in use; one left by a killed
 * run is removed by the next), sync it and rename it into place without
 * replacing anything (out.h's out_move_noreplace: what appeared at the name
 * meanwhile, a user's file or another run's output, stays, and the call
 * fails with NR_EIO saying it exists), so the output appears complete or
 * not at all, and never modify their input.
 * Every piece read is checked against its checksum and every file written
 * is read back and checked.  Memory stays under twice the largest tensor
 * (of one kind) and a few MiB, never the model.  An archive input is first
 * extracted into the temporary, so it needs its size in free disk space
 * once more; so does an archive output, built as a directory first. */
#ifndef NEREUS_STORE_H
#define NEREUS_STORE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/err.h"
#include "doc/job.h"
#include "state/layout.h"

/* One model's layout in a store: what a plan's home configuration says
 * (plan.h: home[m].tp, .pp, .dp, .zero) with the model's name and
 * architecture from the job. */
struct store_layout {
	char name[NAME_MAX_LEN];   /* the job's model name; [A-Za-z0-9._-], not "." or ".." */
	struct arch arch;          /* arch.layers == 0: the one the source gives */
	int tp, pp, dp;            /* layers split evenly over the pp stages */
	bool zero;                 /* master and Adam state split across DP */
	bool trainable;            /* keeps fp32 master weights and Adam m and v */
};

/* Called on the caller's thread as the work goes, with the bytes of
 * piece data written so far of total; the last call has done == total.
 * A tool draws a progress bar with it. */
typedef void (*store_progress_fn)(void *ctx, uint64_t done, uint64_t total);

struct store_opts {
	/* When not NULL and set non-zero (by the caller's SIGINT or SIGTERM
	 * handler), the work stops, its temporary is removed and the call
	 * returns NR_EIO saying it was interrupted. */
	volatile sig_atomic_t *cancel;
	store_progress_fn progress; /* may be NULL */
	void *progress_ctx;
	/* Told, in a sentence, what the work leaves out on purpose (a
	 * checkpoint's buffers that are not parameters); may be NULL. */
	void (*notice)(void *ctx, const char *msg);
	void *notice_ctx;
	/* Skip every fsync, as initdb --no-sync does: faster, but after a
	 * crash of the system the output may be incomplete.  For tests and
	 * scratch copies. */
	bool no_sync;
};

/* Reshard the store src into a new store dst: each model of src takes the
 * layout of the entry of to[] with its name (an architecture given there
 * must match the store's), models not named keep theirs.  A model that
 * becomes trainable gets Adam's initial state (master = the weights in
 * fp32, m = v = 0); one that stops being trainable loses its optimizer
 * state.  NR_EINPUT for bad input (the message names the file, tensor and
 * byte offset), NR_EIO for a failure to read or write or an interrupt.
 * dst must not exist (NR_EINPUT when it does at the start, NR_EIO when it
 * appears before the end). */
int store_apply(const char *src, const struct store_layout *to, int nto, const char *dst,
		const struct store_opts *o, struct err *e);

/* One Hugging Face checkpoint to import: a directory holding config.json
 * and model.safetensors, or model.safetensors.index.json and the files it
 * names; the model's tensors must be exactly Llama's (model.embed_tokens,
 * model.layers.N.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj,
 * input_layernorm, post_attention_layernorm}, model.norm, and lm_head
 * unless the embeddings are tied), all of one dtype (BF16, F16 or F32). */
struct store_hf {
	const char *dir;
	struct store_layout layout; /* arch.layers == 0: config.json's */
};

/* Make the store dst from n checkpoints, one model each.  A given
 * architecture must match config.json and the tensors.  The store keeps
 * config.json, the index and each file's header verbatim, so that
 * store_export gives the checkpoint back bit for bit. */
int store_import(const struct store_hf *models, int n, const char *dst,
		 const struct store_opts *o, struct err *e);

/* Write the weights of model (NULL: the store's only model) as a Hugging
 * Face checkpoint directory dst.  With max_shard 0, the files, names,
 * headers, config.json and index the store was imported from (or that
 * the store it was saved from kept) when it has them and every tensor
 * still fits its header, else files of at most max_shard bytes of tensor
 * data each (max_shard 0 then means 5e9, Hugging Face's default): one
 * model.safetensors when everything fits in one, else
 * model-0000k-of-0000n.safetensors and model.safetensors.index.json. */
int store_export(const char *src, const char *model, uint64_t max_shard, const char *dst,
		 const struct store_opts *o, struct err *e);

/* Remove from dir the temporaries of outputs whose writers were killed
 * (.NAME.tmp.XXXXXX folders that hold only what a writer puts there and
 * that no writer has locked), whatever output they were for. */
void store_sweep(const char *dir);

/* --- state in memory ---------------------------------------------------------- */

/* A store opened to read state into a running job's memory: a directory
 * (an archive is first resharded into one with store_apply), checked as
 * store_apply checks its input. */
struct store_reader;

int store_reader_open(struct store_reader **r, const char *src, struct err *e);
void store_reader_close(struct store_reader *r);
/* Its manifest: the models (their index is the model argument below),
 * layouts, architectures and the run's saved object. */
const struct manifest *store_reader_manifest(const struct store_reader *r);
/* How messages name the store. */
const char *store_reader_name(const struct store_reader *r);
/* The manifest's pieces of model's tensor of kind: *n indices into its
 * pieces. */
const size_t *store_reader_pieces(const struct store_reader *r, int model, enum state_kind kind,
				  int tensor, size_t *n);
/* Piece i's data as the store keeps them (in its tensor's dtype), read
 * whole and checked against its checksum (a mismatch is NR_EINPUT);
 * valid until the next call. */
int store_reader_piece(struct store_reader *r, size_t i, const void **data, struct err *e);
/* Fill buf, the fp32 buffer of kind that rank (tp, pp, dp) of layout lo
 * holds (layout_pieces' offsets, copies included, padding zeroed), with
 * model's state, whatever layout the store keeps it in.  lo's
 * architecture must be the store's.  NR_EINPUT when the store lacks the
 * kind or a piece, or a piece's data do not match its checksum (as
 * nereus-manifest(5) says: a damaged store is bad input); NR_EIO for a
 * failed read. */
int store_reader_load(struct store_reader *r, int model, enum state_kind kind,
		      const struct layout *lo, int tp, int pp, int dp, float *buf,
		      struct err *e);

/* One model's state to save: its name, architecture and layout, and
 * each rank's fp32 buffer of each kind it keeps (for a kind not split
 * across DP, asked for dp 0 only). */
struct store_state {
	struct store_layout lo;
	const unsigned char *wdtype; /* per global tensor, as mmodel.wdtype; NULL: the arch's */
	const float *(*buffer)(void *ctx, enum state_kind kind, int tp, int pp, int dp);
	void *ctx;
	/* The store directory the state was loaded from, or NULL: when its
	 * model of this name has the same architecture and came from a
	 * Hugging Face checkpoint, its config.json, index, file headers and
	 * extra files are kept, and export writes the tensors into those
	 * files while each still fits its header. */
	const char *origin;
};

/* Make the store dst from n models in memory (weights rounded to nearest
 * even into their dtype) and run, the object a run saves beside them (may
 * be NULL).  dst must not exist; it appears whole or not at all. */
int store_save(const char *dst, const struct store_state *models, int n, json_t *run,
	       const struct store_opts *o, struct err *e);

/* The layouts of the models in store src, in the manifest's order: up to
 * max entries into out, their number into *n.  Reads only the manifest. */
int store_layouts(const char *src, struct store_layout *out, int max, int *n,
		  struct err *e);

struct pconf;
struct plan;
/* The layout model m of job takes in configuration c (a plan's home[m]):
 * the model's name and architecture from the job, c's TP, PP and DP, ZeRO
 * when c splits the optimizer state across DP (ZeRO-1 and up), trainable
 * when the model trains. */
void store_layout_of(const struct job *job, int m, const struct pconf *c,
		     struct store_layout *lo);
/* The layouts plan p gives the job's models, into lo[0..job->nmodels):
 * each model's in its home configuration. */
void store_layouts_of_plan(const struct job *job, const struct plan *p,
			   struct store_layout *lo);

/* --- the manifest ------------------------------------------------------------ */

#define STORE_MANIFEST "manifest.json"

/* Where a model came from on Hugging Face, kept for store_export. */
struct hf_file {
	char *name;                /* "model-00001-of-00002.safetensors" */
	char *header;              /* aux file holding its first data_start bytes verbatim */
	size_t ntensors;
	int *tensors;              /* Hugging Face tensor ids (hf_tensor), in data order */
};

struct hf_origin {
	char *config;              /* aux file: config.json verbatim */
	char *index;               /* aux file: model.safetensors.index.json, or NULL */
	size_t nfiles;
	struct hf_file *files;
	/* aux files: the checkpoint's files beside the weights (tokenizer.json,
	 * generation_config.json, ...) that export writes back as they were */
	size_t nextra;
	char **extra;
};

struct mmodel {
	struct store_layout lo;
	struct layout layout;      /* layout_init of lo */
	bool has_hf;
	struct hf_origin hf;
	/* Per global tensor, the enum st_dtype of its weights: a checkpoint
	 * may keep some (norms, say) in fp32 beside bf16 weights, and every
	 * reshard and export keeps each tensor's own.  NULL: all the arch's. */
	unsigned char *wdtype;
};

/* A file the store carries verbatim (kept from an import). */
struct maux {
	char *path;                /* relative to the store's root */
	uint64_t bytes;
	uint64_t xxh3;
};

struct mpiece {
	int model;                 /* index into models */
	enum state_kind kind;
	int tensor;                /* index into the model's global tensors */
	struct box box;
	int tp, pp, dp;            /* the rank whose shard holds it (dp 0 when unsplit) */
	uint64_t offset;           /* byte offset of its data in its shard */
	uint64_t xxh3;             /* XXH3-64 of its data */
};

struct manifest {
	int nmodels;
	struct mmodel models[MAX_MODELS];
	size_t naux;
	struct maux *aux;
	size_t npieces;
	struct mpiece *pieces;
	/* What a run saved beside its state to continue from it (nereus-run
	 * writes and reads it; the store keeps it as it is, through every
	 * reshard); NULL when none. */
	json_t *run;
};

/* Parse and check a manifest held in buf[0..len); name is used in
 * messages (file:line:col).  Every piece must be exactly a piece its
 * file's rank owns in the model's layout, and the pieces of each model and
 * kind must cover every global tensor.  NR_OK or NR_EINPUT. */
int manifest_parse(struct manifest *m, const char *name, const char *buf, size_t len,
		   struct err *e);
/* The manifest as a "manifest" document. */
json_t *manifest_to_json(const struct manifest *m);
void manifest_free(struct manifest *m);

/* The shard holding kind for rank (tp, pp, dp) of model lo, relative to
 * the store's root; dp is ignored when the kind is not split across DP. */
void store_shard_path(char *out, size_t n, const struct store_layout *lo,
		      enum state_kind kind, int tp, int pp, int dp);
/* The dtype (enum st_dtype) model mm keeps tensor's kind in. */
int mmodel_dtype(const struct mmodel *mm, enum state_kind kind, int tensor);
/* Give tensor's weights of mm the dtype t (enum st_dtype). */
int mmodel_set_dtype(struct mmodel *mm, int tensor, int t);

/* Whether lo keeps kind, and whether it splits kind across DP. */
bool store_has_kind(const struct store_layout *lo, enum state_kind kind);
bool store_kind_split(const struct store_layout *lo, enum state_kind kind);

/* --- Hugging Face names --------------------------------------------------------- */

/* Hugging Face tensors of a are numbered: 0 model.embed_tokens.weight,
 * 1 + 9 i + j the j-th of layer i's nine (input_layernorm, q, k, v, o
 * projections, post_attention_layernorm, gate, up, down projections),
 * then model.norm.weight, then lm_head.weight unless tied. */
int hf_ntensors(const struct arch *a);
/* Tensor id's name, and where it sits in Nereus's global tensors: the
 * global tensor index and the box (row-major order equal to the Hugging
 * Face tensor's), and its own shape. */
void hf_tensor(const struct arch *a, int id, char *name, size_t n, int *tensor,
	       struct box *box, int *ndim, uint64_t shape[BOX_MAXDIM]);
/* The id of the tensor called name, or -1. */
int hf_lookup(const struct arch *a, const char *name);

#endif
