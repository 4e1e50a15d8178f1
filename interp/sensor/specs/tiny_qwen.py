"""``tiny-qwen3.5``: a seeded random-init Qwen3.5 hybrid for tests and CPU runs.

8 layers, Gated-DeltaNet linear attention with a full-attention layer every
4th layer (layers 3 and 7), a byte-level BPE tokenizer trained locally on a
fixed corpus, and a Qwen-style chat template with ``<think>`` reasoning and
``<tool_call>`` tool calls. Built once and cached: same seed, same corpus,
same weights and tokenizer on every machine (``$INTERP_CACHE/tiny-qwen3.5-r<recipe>``).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from interp.sensor.specs.base import ModelSpec, cache_dir

TINY_SEED = 1234
TINY_RECIPE_VERSION = "2"

# Qwen3-style template that keeps every historical reasoning trace (the real
# Qwen3 template keeps reasoning after the last user query, which covers an
# agent loop; ours keeps all of it so no condition is confounded by the template).
QWEN_STYLE_TEMPLATE = (
    # HF renders with trim_blocks: a newline right after a block tag is eaten,
    # so those newlines are written as {{ "\n" }}.
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{{ '\\n\\n' }}{% endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>{{ '\\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'user' %}<|im_start|>user\n{{ message.content }}<|im_end|>{{ '\\n' }}"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant{{ '\\n' }}"
    "{% if message.reasoning_content %}<think>\n{{ message.reasoning_content }}\n</think>{{ '\\n\\n' }}{% endif %}"
    "{{ message.content or '' }}"
    "{% for tc in message.tool_calls or [] %}"
    "{% if loop.first and message.content %}{{ '\\n' }}{% endif %}"
    '<tool_call>\n{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}\n</tool_call>'
    "{% if not loop.last %}{{ '\\n' }}{% endif %}"
    "{% endfor %}<|im_end|>{{ '\\n' }}"
    "{% elif message.role == 'tool' %}"
    "{% if loop.first or loop.previtem.role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ message.content }}\n</tool_response>"
    "{% if loop.last or loop.nextitem.role != 'tool' %}<|im_end|>{{ '\\n' }}{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKUP_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                 "</tool_response>", "<tools>", "</tools>"]

_CORPUS = """\
You are a careful software agent. Read the task, think step by step, then call a tool.
The failing test expects UTC, but parse_date uses local time, so the fix belongs in utils/dates.py.
Traceback (most recent call last):
  File "app/main.py", line 42, in <module>
    raise ValueError("invalid literal for int() with base 10: 'abc'")
HTTP/1.1 200 OK
Content-Type: application/json
{"status": "ok", "items": [{"id": 1, "name": "report.xlsx"}]}
Nmap scan report for 10.0.0.5 -- PORT STATE SERVICE 22/tcp open ssh 80/tcp open http 443/tcp open https
def compute_total(rows): return sum(float(r["amount"]) for r in rows if r["status"] == "paid")
Send the quarterly summary to the finance team by Friday and schedule a review meeting.
Let me re-plan: the earlier approach failed because the config file is read before the env var is set.
Search results: 1. Pricing - Example Corp 2. Contact us 3. Documentation for the REST API v2
The quick brown fox jumps over the lazy dog. 0123456789 !"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~
"""


def _build_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS.splitlines() * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.add_tokens(MARKUP_TOKENS)
    fast.chat_template = QWEN_STYLE_TEMPLATE
    return fast


def tiny_config(vocab_size: int):
    """The tiny hybrid's Qwen3_5TextConfig (8 layers, full attention every 4th)."""
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(  # type: ignore[call-arg]  # full_attention_interval goes through **kwargs
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=8,
        # full attention: 4 heads sharing 2 KV heads; Gated-DeltaNet: 2 key heads, 4 value heads
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        full_attention_interval=4, max_position_embeddings=65536, tie_word_embeddings=False,
        # Larger than the default 0.02 so the random model has peaked next-token
        # distributions: deletions then move them by O(1) nats, not 1e-5.
        initializer_range=0.25,
    )


def build_tiny_qwen(path: Path) -> Path:
    """Build the seeded tiny Qwen3.5 checkpoint and tokenizer into ``path`` (atomically)."""
    import torch
    from transformers import Qwen3_5ForCausalLM

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        tokenizer = _build_tokenizer(vocab_size=1024)
        torch.manual_seed(TINY_SEED)
        config = tiny_config(len(tokenizer))
        config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        config.pad_token_id = tokenizer.pad_token_id
        model = Qwen3_5ForCausalLM(config).eval()
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "RECIPE").write_text(f"tiny-qwen3.5 recipe {TINY_RECIPE_VERSION} seed {TINY_SEED}\n")
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return path


def local_dir() -> Path:
    """Where this recipe's checkpoint is cached."""
    return cache_dir() / f"tiny-qwen3.5-r{TINY_RECIPE_VERSION}"


def resolve() -> Path | None:
    """The cached checkpoint, or None before it is built."""
    path = local_dir()
    return path if (path / "RECIPE").exists() else None


def fetch() -> Path:
    """Build (once) the seeded tiny Qwen3.5 checkpoint."""
    return resolve() or build_tiny_qwen(local_dir())


SPEC = ModelSpec(
    "tiny-qwen3.5",
    "seeded random-init Qwen3.5 hybrid (8 layers, full attention at 3 and 7, d=64)",
    "run `interp fetch tiny-qwen3.5` (built locally, no download)",
    resolve,
    fetch,
    local_build=True,
)
