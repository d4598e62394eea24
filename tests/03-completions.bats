#!/usr/bin/env bats
# The shell completions of completions/bash and completions/zsh, one test
# per tool and shell: the options of the tool and of each subcommand, the
# subcommands, the values of options that take a name from a list, and
# files where a document is expected.  bash: the completion function driven
# through COMP_WORDS and COMP_CWORD, with bash-completion's
# _init_completion; zsh: an interactive zsh in a pseudo-terminal with
# compinit (test_helper/zsh-complete.zsh).

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	COMPLETIONS=$BATS_TEST_DIRNAME/../completions
	BASH_COMPLETION=/usr/share/bash-completion/bash_completion
	# what a file argument can complete to
	touch job.json notes.txt
	mkdir docs
}

# bash_offers TOOL WORD...: what bash completes the line "TOOL WORD..." to
# (the last word, perhaps empty, is the one completed), sorted, on one line.
bash_offers() {
	[ -r "$BASH_COMPLETION" ] || skip "bash-completion is not installed"
	bash -c 'source "$1"; source "$2"; fn=$3; shift 3
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
"$fn" 2> /dev/null; printf "%s\n" "${COMPREPLY[@]}"' \
		_ "$BASH_COMPLETION" "$COMPLETIONS/bash/$1" "_${1//-/_}" "$@" | LC_ALL=C sort -u | paste -sd ' '
}

# zsh_offers TOOL WORD...: the same in zsh.
zsh_offers() {
	command -v zsh > /dev/null || skip "zsh is not installed"
	timeout 60 zsh "$BATS_TEST_DIRNAME/test_helper/zsh-complete.zsh" "$COMPLETIONS/zsh" "$*" |
		paste -sd ' '
}

@test "bash: nereus-plan" {
	run bash_offers nereus-plan --
	assert_output '--cluster --cost --current --exhaustive --format --help --job --layout --max-staleness --min-gain --output --pin --remaining-steps --space --stats --svg --version'
	run bash_offers nereus-plan --layout ''
	assert_output 'adaptive fixed openrlhf openrlhf-hybrid verl verl-megatron verl-tuned'
	run bash_offers nereus-plan --format t
	assert_output 'table'
	run bash_offers nereus-plan --format ''
	assert_output 'json openrlhf table verl'
	run bash_offers nereus-plan --space v
	assert_output 'verl-fsdp verl-megatron'
	run bash_offers nereus-plan --job ''
	assert_output 'docs job.json'
}

@test "zsh: nereus-plan" {
	run zsh_offers nereus-plan --
	assert_output '--cluster --cost --current --exhaustive --format --help --job --layout --max-staleness --min-gain --output --pin --remaining-steps --space --stats --svg --version'
	run zsh_offers nereus-plan --layout ''
	assert_output 'adaptive fixed openrlhf openrlhf-hybrid verl verl-megatron verl-tuned'
	run zsh_offers nereus-plan --format t
	assert_output 'table'
	run zsh_offers nereus-plan --format ''
	assert_output 'json openrlhf table verl'
	run zsh_offers nereus-plan --space v
	assert_output 'verl-fsdp verl-megatron'
	run zsh_offers nereus-plan --job ''
	assert_output 'docs job.json'
}

@test "bash: nereus-profile" {
	run bash_offers nereus-profile ''
	assert_output '--help --version -V -h bench fit'
	run bash_offers nereus-profile bench --
	assert_output '--cluster-out --help --no-gpu --output --quick --ranks --runs --version'
	run bash_offers nereus-profile bench --cluster-out ''
	assert_output 'docs job.json notes.txt'
	run bash_offers nereus-profile fit --
	assert_output '--cluster --from --half-life --help --holdout --job --output --plan --prior --skip-bad --version'
	run bash_offers nereus-profile fit --from ''
	assert_output 'openrlhf verl'
	run bash_offers nereus-profile fit --plan ''
	assert_output 'docs job.json'
	run bash_offers nereus-profile fit --cluster ''
	assert_output 'docs job.json'
	# the trace: step records, any file
	run bash_offers nereus-profile fit --job job.json ''
	assert_output 'docs job.json notes.txt'
}

@test "zsh: nereus-profile" {
	run zsh_offers nereus-profile ''
	assert_output 'bench fit'
	run zsh_offers nereus-profile bench --
	assert_output '--cluster-out --help --no-gpu --output --quick --ranks --runs --version'
	run zsh_offers nereus-profile bench --cluster-out ''
	assert_output 'docs job.json notes.txt'
	run zsh_offers nereus-profile fit --
	assert_output '--cluster --from --half-life --help --holdout --job --output --plan --prior --skip-bad --version'
	run zsh_offers nereus-profile fit --from ''
	assert_output 'openrlhf verl'
	run zsh_offers nereus-profile fit --plan ''
	assert_output 'docs job.json'
	run zsh_offers nereus-profile fit --cluster ''
	assert_output 'docs job.json'
	run zsh_offers nereus-profile fit --job job.json ''
	assert_output 'docs job.json notes.txt'
}

@test "bash: nereus-run and its subcommands" {
	run bash_offers nereus-run ''
	assert_output 'compare generate init score'
	run bash_offers nereus-run --
	assert_output '--adopt --charge --cluster --cost --engine --events --every --help --job --log-every --max-staleness --min-gain --noise --now --pace --plan --policy --quiet --records --refit --resume --save --save-every --seed --state --steps --summary --svg --tensorboard --until --version'
	run bash_offers nereus-run --engine ''
	assert_output 'builtin sim'
	run bash_offers nereus-run --engine builtin --state ''
	assert_output 'docs'
	run bash_offers nereus-run init --
	assert_output '--help --job --output --seed --version'
	run bash_offers nereus-run generate --
	assert_output '--help --max-new --model --output --prompts --seed --state --temperature --tokenizer --top-k --top-p --version'
	run bash_offers nereus-run score --
	assert_output '--help --model --output --prompts --state --tokenizer --version'
	run bash_offers nereus-run score --tokenizer ''
	assert_output 'docs job.json'
	touch prompts.jsonl
	run bash_offers nereus-run generate --prompts ''
	assert_output 'docs prompts.jsonl'
	run bash_offers nereus-run compare --
	assert_output '--charge --cluster --cost --engine --events --every --help --job --min-gain --noise --out-dir --seed --state --steps --version'
	run bash_offers nereus-run --policy ''
	assert_output 'adaptive fixed openrlhf openrlhf-hybrid verl verl-megatron verl-tuned'
	run bash_offers nereus-run compare --charge ''
	assert_output 'bound graph'
	run bash_offers nereus-run compare --out-dir ''
	assert_output 'docs'
	run bash_offers nereus-run compare --engine ''
	assert_output 'builtin sim'
	run bash_offers nereus-run compare --engine builtin --state ''
	assert_output 'docs'
}

@test "zsh: nereus-run and its subcommands" {
	run zsh_offers nereus-run ''
	assert_output 'compare generate init score'
	run zsh_offers nereus-run --
	assert_output '--adopt --charge --cluster --cost --engine --events --every --help --job --log-every --max-staleness --min-gain --noise --now --pace --plan --policy --quiet --records --refit --resume --save --save-every --seed --state --steps --summary --svg --tensorboard --until --version'
	run zsh_offers nereus-run --engine ''
	assert_output 'builtin sim'
	run zsh_offers nereus-run --engine builtin --state ''
	assert_output 'docs'
	run zsh_offers nereus-run init --
	assert_output '--help --job --output --seed --version'
	run zsh_offers nereus-run generate --
	assert_output '--help --max-new --model --output --prompts --seed --state --temperature --tokenizer --top-k --top-p --version'
	run zsh_offers nereus-run score --
	assert_output '--help --model --output --prompts --state --tokenizer --version'
	run zsh_offers nereus-run score --tokenizer ''
	assert_output 'docs job.json'
	touch prompts.jsonl
	run zsh_offers nereus-run generate --prompts ''
	assert_output 'docs prompts.jsonl'
	run zsh_offers nereus-run compare --
	assert_output '--charge --cluster --cost --engine --events --every --help --job --min-gain --noise --out-dir --seed --state --steps --version'
	run zsh_offers nereus-run --policy ''
	assert_output 'adaptive fixed openrlhf openrlhf-hybrid verl verl-megatron verl-tuned'
	run zsh_offers nereus-run compare --charge ''
	assert_output 'bound graph'
	run zsh_offers nereus-run compare --out-dir ''
	assert_output 'docs'
	run zsh_offers nereus-run compare --engine ''
	assert_output 'builtin sim'
	run zsh_offers nereus-run compare --engine builtin --state ''
	assert_output 'docs'
}

@test "bash: nereus-transition and its subcommands" {
	run bash_offers nereus-transition ''
	assert_output 'apply export import live'
	run bash_offers nereus-transition --
	assert_output '--cluster --cost --edges --format --from --help --job --output --svg --to --version'
	run bash_offers nereus-transition apply --
	assert_output '--cluster --help --job --output --state --to --version'
	run bash_offers nereus-transition import --
	assert_output '--cluster --help --hf --job --model --output --plan --version'
	run bash_offers nereus-transition export --
	assert_output '--help --max-shard --model --output --state --version'
	run bash_offers nereus-transition live --
	assert_output '--cluster --from --help --job --nccl --state --to --verify --version'
	run bash_offers nereus-transition --format ''
	assert_output 'json table'
	run bash_offers nereus-transition import --hf ''
	assert_output 'docs'
}

@test "zsh: nereus-transition and its subcommands" {
	run zsh_offers nereus-transition ''
	assert_output 'apply export import live'
	run zsh_offers nereus-transition --
	assert_output '--cluster --cost --edges --format --from --help --job --output --svg --to --version'
	run zsh_offers nereus-transition apply --
	assert_output '--cluster --help --job --output --state --to --version'
	run zsh_offers nereus-transition import --
	assert_output '--cluster --help --hf --job --model --output --plan --version'
	run zsh_offers nereus-transition export --
	assert_output '--help --max-shard --model --output --state --version'
	run zsh_offers nereus-transition live --
	assert_output '--cluster --from --help --job --nccl --state --to --verify --version'
	run zsh_offers nereus-transition --format ''
	assert_output 'json table'
	run zsh_offers nereus-transition import --hf ''
	assert_output 'docs'
}
