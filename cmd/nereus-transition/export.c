/* nereus-transition export: one model of a state store written back as a
 * Hugging Face checkpoint. */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "transition.h"

static const char export_usage[] =
	"usage: nereus-transition export --state DIR [--model NAME]\n"
	"                                [--max-shard BYTES] -o DIR\n"
	"\n"
	"  --state DIR            the state store (a directory, .tar or .tar.zst)\n"
	"  --model NAME           the model to export (default: the store's only one)\n"
	"  --max-shard BYTES      files of at most BYTES of tensor data (default: the\n"
	"                         files the model was imported from, else 5e9 bytes)\n"
	"  -o, --output DIR       the Hugging Face checkpoint directory; must not exist\n"
	"  -h, --help             show this help\n"
	"  -V, --version          show the version\n"
	"\n"
	"Exit status: 0 checkpoint written, 2 bad usage or input, 4 runtime or I/O\n"
	"failure or interrupted (nothing written).\n";

static const struct option export_options[] = {
	{ "state", required_argument, NULL, OPT_STATE },
	{ "model", required_argument, NULL, OPT_MODEL },
	{ "max-shard", required_argument, NULL, OPT_MAXSHARD },
	{ "output", required_argument, NULL, 'o' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

struct export_args {
	const char *state, *model, *dst;
	long max_shard;            /* 0: as imported, else 5e9 */
};

/* OPTIONS_DONE: help or version shown; else an exit status. */
static int export_parse(int argc, char **argv, struct export_args *a)
{
	int c, rc;

	memset(a, 0, sizeof *a);
	while ((c = getopt_long(argc, argv, ":o:hV", export_options, NULL)) != -1) {
		switch (c) {
		case OPT_STATE: a->state = optarg; break;
		case OPT_MODEL: a->model = optarg; break;
		case OPT_MAXSHARD:
			if ((rc = parse_long("--max-shard", optarg, 1, LONG_MAX, &a->max_shard)))
				return rc;
			break;
		case 'o': a->dst = optarg; break;
		default: return option_tail(c, argc, argv, export_options, export_usage);
		}
	}
	if ((rc = option_tail(-1, argc, argv, export_options, export_usage)))
		return rc;
	if (!a->state || !a->dst)
		return usage_error("export needs --state and -o");
	return NR_OK;
}

static int export_run(const struct export_args *a)
{
	struct store_opts o;
	struct progress p;
	struct err e = { 0 };
	int rc;

	store_begin(&o, &p);
	rc = store_export(a->state, a->model, (uint64_t)a->max_shard, a->dst, &o, &e);
	return store_end(&p, rc, &e);
}

int cmd_export(int argc, char **argv)
{
	struct export_args a;
	int rc = export_parse(argc, argv, &a);

	if (rc == OPTIONS_DONE)
		return NR_OK;
	return rc ? rc : export_run(&a);
}
