/* Stop tokens (lib/engine/stops.h): a checkpoint's generation_config.json
 * "eos_token_id" as a number and as a list, tokenizer_config.json
 * "eos_token" as a string and as an object, no files at all, what is not
 * a token, and a job's data.stop_tokens.  Over the byte vocabulary, where
 * "x" is id 120, <|bos|> 256 and <|eos|> 257. */
#include <stdlib.h>
#include <string.h>

#include "engine/stops.h"
#include "engine/task.h"
#include "unit.h"
#include "unitfs.h"

static char root[PATH_MAX];

static struct tokenizer tok;

/* A fresh checkpoint folder root/name holding the files given (NULL: not
 * there); its path into dir. */
static void checkpoint(const char *name, const char *gen, const char *tcfg, char *dir,
		       size_t n)
{
	char file[PATH_MAX + 64];
	FILE *f;

	if (snprintf(dir, n, "%s/%s", root, name) >= (int)n)
		return;
	mkdir(dir, 0755);
	snprintf(file, sizeof file, "%s/generation_config.json", dir);
	if (gen && (f = fopen(file, "w"))) {
		fputs(gen, f);
		fclose(f);
	}
	snprintf(file, sizeof file, "%s/tokenizer_config.json", dir);
	if (tcfg && (f = fopen(file, "w"))) {
		fputs(tcfg, f);
		fclose(f);
	}
}

/* The stops of a folder with these files, or -1 entries after an error. */
static int read_stops(const char *name, const char *gen, const char *tcfg, struct stops *s,
		      struct err *e)
{
	char dir[PATH_MAX];

	checkpoint(name, gen, tcfg, dir, sizeof dir);
	stops_init(s, &tok);
	return stops_add_checkpoint(s, &tok, dir, e);
}

static bool are(const struct stops *s, int n, const int32_t *want)
{
	if (s->n != n)
		return false;
	for (int i = 0; i < n; i++)
		if (s->id[i] != want[i])
			return false;
	return true;
}

static void no_files_mean_the_tokenizers_eos(void)
{
	struct stops s;
	struct err e;

	CHECK(read_stops("none", NULL, NULL, &s, &e) == NR_OK);
	CHECK(are(&s, 1, (int32_t[]){ 257 }));
	/* files without the fields, or with null, add nothing either */
	CHECK(read_stops("empty", "{\"bos_token_id\": 256}", "{\"eos_token\": null}", &s, &e) ==
	      NR_OK);
	CHECK(are(&s, 1, (int32_t[]){ 257 }));
}

static void generation_config_number_and_list(void)
{
	struct stops s;
	struct err e;

	CHECK(read_stops("num", "{\"eos_token_id\": 120}", NULL, &s, &e) == NR_OK);
	CHECK(are(&s, 2, (int32_t[]){ 257, 120 }));
	/* Llama 3 Instruct's form; the tokenizer's own is not repeated */
	CHECK(read_stops("list", "{\"eos_token_id\": [257, 121, 122]}", NULL, &s, &e) == NR_OK);
	CHECK(are(&s, 3, (int32_t[]){ 257, 121, 122 }));
}

static void tokenizer_config_string_and_object(void)
{
	struct stops s;
	struct err e;

	CHECK(read_stops("str", NULL, "{\"eos_token\": \"x\"}", &s, &e) == NR_OK);
	CHECK(are(&s, 2, (int32_t[]){ 257, 120 }));
	CHECK(read_stops("obj", NULL,
			 "{\"eos_token\": {\"content\": \"<|bos|>\", \"lstrip\": false}}", &s,
			 &e) == NR_OK);
	CHECK(are(&s, 2, (int32_t[]){ 257, 256 }));
	/* Llama 3's tokenizer_config.json holds an integer past 64 bits */
	CHECK(read_stops("big", NULL, "{\"model_max_length\": 1000000000000000019884624838656, "
			 "\"eos_token\": \"x\"}", &s, &e) == NR_OK);
	CHECK(are(&s, 2, (int32_t[]){ 257, 120 }));
	/* both files: generation_config.json's first */
	CHECK(read_stops("both", "{\"eos_token_id\": [121]}", "{\"eos_token\": \"x\"}", &s, &e) ==
	      NR_OK);
	CHECK(are(&s, 3, (int32_t[]){ 257, 121, 120 }));
}

static void what_is_not_a_token(void)
{
	struct stops s;
	struct err e;

	CHECK(read_stops("past", "{\"eos_token_id\": [120, 300]}", NULL, &s, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "past/generation_config.json: stop token 300 is not a token") != NULL);
	CHECK(read_stops("text", NULL, "{\"eos_token\": \"<|im_end|>\"}", &s, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "text/tokenizer_config.json: stop token '<|im_end|>' is not a "
			    "token") != NULL);
	CHECK(read_stops("type", "{\n\"eos_token_id\": \"x\"}", NULL, &s, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "type/generation_config.json:2:17: eos_token_id: expected a token "
			    "id or a list") != NULL);
	CHECK(read_stops("elem", "{\"eos_token_id\": [1, 2.5]}", NULL, &s, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "eos_token_id[1]: expected a token id") != NULL);
	CHECK(read_stops("broken", "{\"eos_token_id\": ", NULL, &s, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "broken/generation_config.json") != NULL);
	CHECK(read_stops("many", "{\"eos_token_id\": [1, 2, 3, 4, 5, 6, 7, 8]}", NULL, &s, &e) ==
	      NR_EINPUT);
	CHECK(strstr(e.msg, "stop token 8 is one too many: at most 8") != NULL);
}

static void a_jobs_data(void)
{
	struct data_config d = { .nstops = 2, .stops = { { 65, "" }, { -1, "<|bos|>" } } };
	const int32_t resp[] = { 'x', 'y', 'A', 256, 257 };
	struct stops s;
	struct err e;
	char dir[PATH_MAX];

	/* the byte vocabulary: no folder, the job's stops only */
	CHECK(stops_for_data(&s, &tok, &d, &e) == NR_OK);
	CHECK(are(&s, 3, (int32_t[]){ 257, 65, 256 }));
	CHECK(task_response_len(resp, 5, &s) == 2);
	/* a tokenizer.json's folder adds its checkpoint's, before the job's */
	checkpoint("job", "{\"eos_token_id\": 121}", NULL, dir, sizeof dir);
	CHECK(snprintf(d.tokenizer, sizeof d.tokenizer, "%s/tokenizer.json", dir) <
	      (int)sizeof d.tokenizer);
	CHECK(stops_for_data(&s, &tok, &d, &e) == NR_OK);
	CHECK(are(&s, 4, (int32_t[]){ 257, 121, 65, 256 }));
	CHECK(task_response_len(resp, 5, &s) == 1);
	d.stops[1] = (struct data_stop){ -1, "<|nope|>" };
	CHECK(stops_for_data(&s, &tok, &d, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "the job's data.stop_tokens[1]: stop token '<|nope|>' is not a "
			    "token") != NULL);
}

static void folders(void)
{
	char dir[64];

	stops_dir_of("tokenizer.json", dir, sizeof dir);
	CHECK(strcmp(dir, ".") == 0);
	stops_dir_of("ck/qwen/tokenizer.json", dir, sizeof dir);
	CHECK(strcmp(dir, "ck/qwen") == 0);
	stops_dir_of("/tokenizer.json", dir, sizeof dir);
	CHECK(strcmp(dir, "/") == 0);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	struct err e;

	snprintf(root, sizeof root, "%s/nereus-stops-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		perror(root);
		return 1;
	}
	if (tok_bytes(&tok, &e)) {
		printf("# %s\n", e.msg);
		return 1;
	}
	RUN(no_files_mean_the_tokenizers_eos);
	RUN(generation_config_number_and_list);
	RUN(tokenizer_config_string_and_object);
	RUN(what_is_not_a_token);
	RUN(a_jobs_data);
	RUN(folders);
	tok_free(&tok);
	rmtree(root);
	return UNIT_END();
}
