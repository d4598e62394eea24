# Small Llama checkpoints and jobs for the state-store tests, made with the
# standard library only (fixed seeds): load test_helper/checkpoint.

# checkpoint DIR LAYERS HIDDEN FFN VOCAB: a Hugging Face Llama checkpoint
# (8 query heads, 4 KV heads, BF16, untied) of random weights, made by the
# shipped examples/make-checkpoint.
checkpoint() {
	python3 "$BATS_TEST_DIRNAME/../examples/make-checkpoint" --layers "$2" --hidden "$3" \
		--ffn "$4" --vocab "$5" "$1"
}

# job FILE CONFIG: a GRPO job whose actor (which trains) has the
# architecture of the Hugging Face config.json CONFIG.
job() {
	cat > "$1" <<JSON
{ "nereus": 1, "kind": "job", "name": "tiny", "algorithm": "grpo",
  "models": { "actor": { "hf_config": "$2", "stages": ["generation", "inference", "training"] } },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 2, "prompt_len": 64,
             "response_len": { "mean": 64, "p90": 64, "max": 64 } } }
JSON
}
