# The tiny jobs of the engine tests: load test_helper/tiny-job.

# job NAME ALGORITHM MODELS [RL [DATA]]: a tiny job, NAME.json, whose
# models are the comma-separated MODELS (actor, critic, reference, reward),
# each one layer of hidden 16 over the byte vocabulary (VOCAB ids, DTYPE
# weights: 258 and fp32 unless set); four prompts of
# repeat.jsonl a step, two samples each, responses up to 6 tokens.  RL and
# DATA are the "rl" and "data" objects' members (RL with an actor_optim of
# lr 0.001 unless it has its own).
job() {
	local name=$1 algo=$2 models=$3 rl=${4:-} data=${5:-'"prompts": "repeat.jsonl", "reward": "char_match"'}
	local arch='"arch": { "layers": 1, "hidden": 16, "heads": 2, "kv_heads": 1, "ffn": 32,
		"vocab": '${VOCAB:-258}', "dtype": "'${DTYPE:-fp32}'", "max_position_embeddings": 32 }'
	[[ $rl == *actor_optim* ]] || rl='"actor_optim": { "lr": 0.001 }'${rl:+, $rl}
	local m sep='' ms=''
	for m in ${models//,/ }; do
		case $m in
		actor) ms+="$sep\"actor\": { $arch, \"stages\": [\"generation\", \"inference\", \"training\"] }" ;;
		critic) ms+="$sep\"critic\": { $arch, \"stages\": [\"inference\", \"training\"] }" ;;
		*) ms+="$sep\"$m\": { $arch, \"stages\": [\"inference\"] }" ;;
		esac
		sep=', '
	done
	cat > "$name.json" <<JSON
{ "nereus": 1, "kind": "job", "name": "$name", "algorithm": "$algo",
  "models": { $ms },
  "batch": { "prompts_per_step": 4, "samples_per_prompt": 2, "prompt_len": 5,
             "response_len": { "max": 6 } },
  "rl": { $rl },
  "data": { $data } }
JSON
}
