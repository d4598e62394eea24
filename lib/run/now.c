/* --now DIR: the documents of the conditions now, and the steps left. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/out.h"
#include "run/now.h"

int now_check_dir(const char *dir, struct err *e)
{
	struct stat st;

	if (stat(dir, &st) != 0)
		return err_set(e, NR_EIO, "cannot write into '%s': %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return err_set(e, NR_EINPUT, "cannot write into '%s': %s", dir, strerror(ENOTDIR));
	return NR_OK;
}

int now_write_doc(json_t *doc, const char *dir, const char *name, struct err *e)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	return jdoc_write(doc, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
			  JSON_REAL_PRECISION(10), e);
}

/* The cluster's "down": whole nodes when all their GPUs are, else GPUs. */
static json_t *down_of(const struct cluster *cl)
{
	json_t *down = json_object(), *nodes = json_array(), *gpus = json_array();
	int gpn = cl->gpus_per_node;

	for (int n = 0; n < cl->nodes; n++) {
		int up = 0;
		for (int k = 0; k < gpn; k++)
			up += cl->up[n * gpn + k];
		if (up == 0)
			json_array_append_new(nodes, json_integer(n));
		else
			for (int k = 0; k < gpn; k++)
				if (!cl->up[n * gpn + k])
					json_array_append_new(gpus, json_integer(n * gpn + k));
	}
	json_object_set_new(down, "nodes", nodes);
	json_object_set_new(down, "gpus", gpus);
	return down;
}

int now_publish(const char *dir, json_t *cluster_doc, json_t *job_doc, const struct cond *c,
		bool docs, long remaining, struct err *e)
{
	char path[4096], text[32];
	int rc;

	if (docs) {
		json_object_set_new(cluster_doc, "down", down_of(&c->cl));
		json_object_set_new(cluster_doc, "memory_headroom", json_real(c->cl.headroom));
		json_object_set_new(json_object_get(job_doc, "batch"), "response_len",
				    json_pack("{s:f,s:f,s:I}", "mean", c->job.response.mean, "p90",
					      c->job.response.p90,
					      "max", (json_int_t)c->job.response.max));
		if ((rc = now_write_doc(cluster_doc, dir, "cluster.json", e)) ||
		    (rc = now_write_doc(job_doc, dir, "job.json", e)))
			return rc;
	}
	snprintf(path, sizeof path, "%s/remaining-steps", dir);
	snprintf(text, sizeof text, "%ld\n", remaining);
	return out_write_file_atomic(path, text, strlen(text), e);
}
