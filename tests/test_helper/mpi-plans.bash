# The job, clusters and plans the engine's MPI tests share (43-engine-mpi-
# groups.bats, 44-engine-mpi-live.bats): a tiny GRPO job of a trainable
# actor and a frozen reference, clusters of 2 and 4 GPUs, and the plans
# TP2·DP2, TP1·PP2·DP2, TP4 and one of 2 GPUs that leaves two ranks idle.
# _mpi_plans writes them into the current directory; plan NAME CLUSTER
# ACTOR REFERENCE [GENERATION] makes another.

plan() {
	nereus-plan --job job.json --cluster "$2" --pin actor@training="$3" \
		--pin reference@inference="$4" ${5:+--pin actor@generation=$5} -o "$1.json"
}

_mpi_plans() {
	cat > job.json <<'JSON'
{ "nereus": 1, "kind": "job", "name": "tiny", "algorithm": "grpo",
  "models": {
    "actor": { "arch": { "layers": 2, "hidden": 64, "heads": 8, "kv_heads": 4, "ffn": 176,
                         "vocab": 1000, "dtype": "bf16" }, "stages": ["generation", "training"] },
    "reference": { "arch": { "layers": 2, "hidden": 64, "heads": 8, "kv_heads": 4, "ffn": 176,
                             "vocab": 1000, "dtype": "bf16" }, "stages": ["inference"] } },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 2, "prompt_len": 64,
             "response_len": { "mean": 64, "p90": 64, "max": 64 } } }
JSON
	for n in 2 4; do
		cat > cluster$n.json <<JSON
{ "nereus": 1, "kind": "cluster", "name": "tiny", "nodes": 1, "gpus_per_node": $n,
  "gpu": { "model": "small", "memory_gib": 16, "tflops": 100, "hbm_gbps": 1000 },
  "links": { "intra_node_gbps": 450 } }
JSON
	done
	plan tp2dp2 cluster4.json tp2,pp1,dp2,zero tp1,pp1,dp4,nozero tp2 &&
	plan pp2dp2 cluster4.json tp1,pp2,dp2,zero tp2,pp2,dp1,nozero &&
	plan tp4 cluster4.json tp4,pp1,dp1,nozero tp4,pp1,nozero tp4 &&
	plan half cluster2.json tp2,pp1,dp1,nozero tp1,pp1,dp2,nozero
}
