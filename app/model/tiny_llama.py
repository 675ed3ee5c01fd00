"""The built-in test model: a tiny random-weight Llama with a locally trained tokenizer.

No model hub is reachable on the machines this project is developed on, so the default
model is generated here, deterministically (seeded), the first time it is asked for:

- a byte-level BPE tokenizer (vocab ~1k, ``<s>``/``</s>``/``<pad>``, a chat template)
  trained with ``tokenizers`` on seeded pseudo-words;
- a ``LlamaForCausalLM`` with random weights (hidden 256, 4 layers, 4 heads, 2 KV heads,
  16,384 positions), saved as bf16 safetensors (~9 MB).

Its outputs are gibberish, but the computation, the KV cache and its transfer are real.
"""

from __future__ import annotations

import random
from pathlib import Path

SEED = 20241129
VOCAB_SIZE = 1024
# Positions the model knows: enough for Azure's conversation trace at its true lengths
# (prompts up to 14,050 tokens). RoPE has no weights per position, so this changes no
# weight and no answer; a server's `max_model_len` decides what it accepts.
MAX_POSITIONS = 16384
# Bump when the recipe changes: the cache folder name carries it, so an old cache
# is never mistaken for the new recipe.
RECIPE_VERSION = 2  # 2: 16,384 positions (was 2,048); the same weights

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "to",
    "vi",
    "de",
    "fo",
    "gu",
    "ha",
    "ji",
    "po",
    "qua",
    "ri",
    "se",
    "ti",
    "ul",
    "ve",
    "wo",
    "xi",
    "yo",
    "ze",
    "an",
    "en",
    "in",
    "on",
]


def _corpus(rng: random.Random, lines: int = 4000) -> list[str]:
    words = ["".join(rng.choices(_SYLLABLES, k=rng.randint(1, 4))) for _ in range(600)]
    punctuation = [".", ",", "?", "!", ":", ";"]
    out = []
    for _ in range(lines):
        sentence = " ".join(rng.choices(words, k=rng.randint(4, 16)))
        out.append(sentence.capitalize() + rng.choice(punctuation) + f" {rng.randint(0, 999)}")
    return out


def _train_tokenizer(target: Path, rng: random.Random) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(rng), trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        add_bos_token=True,
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(target))
    return int(tokenizer.get_vocab_size())


def _write_model(target: Path, vocab_size: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        # Wider than the usual 0.02 so logits are spread out and greedy decoding is
        # not decided by bf16 rounding noise (outputs must match across engines).
        initializer_range=0.08,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
    model = model.to(torch.bfloat16)  # type: ignore[arg-type]
    model.save_pretrained(str(target), safe_serialization=True)


def generate(target: Path) -> Path:
    """Write the tiny model into ``target`` (which must not exist yet); return it."""
    target.mkdir(parents=True)
    rng = random.Random(SEED)
    vocab_size = _train_tokenizer(target, rng)
    _write_model(target, vocab_size)
    return target
