"""A tiny, randomly initialised Qwen3 model for fast engine tests.

Nothing can be downloaded from a model hub here, so the model is made locally:
a byte-level BPE tokenizer trained with ``tokenizers`` on the small English
corpus below, and Qwen3 weights drawn from a fixed seed. Its output is noise,
but it loads in vLLM (CPU) and in transformers in seconds, and it exercises the
real tokenizer, chat template, scheduler and detokenizer paths.

The vocabulary is small (~2,000), so English text costs about one token per
3-4 characters: a 1,000-token prompt is a few KB of text.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

MARKER_NAME = ".complete"
SEED = 1234
VOCAB_TARGET = 2000
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2
HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 128, 256, 2, 4, 2, 32
MAX_POSITIONS = 32768
# head_dim 32 on purpose: vLLM's CPU attention rejects head sizes below 32.

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

CORPUS = """\
The morning train left the station a few minutes late, and most of the passengers
spent the first part of the journey looking out of the window at the fields.
A light rain had fallen during the night, so the grass was still wet and the
roads that ran beside the railway were dark and shining. Nobody seemed to mind.

Cooking a good meal does not require expensive tools. A sharp knife, a heavy pan
and a little patience are usually enough. Start with fresh vegetables, cut them
into pieces of the same size so that they cook evenly, and add salt a little at
a time. Taste the food often, because the only way to learn is to pay attention.

The library in our town was built more than a hundred years ago. Its reading room
has tall windows, long wooden tables and a quiet that feels almost solid. Students
come in the afternoon to prepare for their examinations, while older visitors read
the newspapers and talk in low voices about the weather and the price of bread.

When you write a letter to a friend, you do not need to be clever. Say what you
have been doing, ask about their family, and mention something small that made
you laugh. People remember kindness much longer than they remember fine words.

Mountains change the weather around them. Warm air that rises along a slope cools
as it climbs, and the water it carries turns into clouds and then into rain or
snow. That is why one side of a mountain range can be green and full of forests
while the other side, only a short distance away, is dry and almost empty.

A small company that wants to grow must first understand its customers. What do
they need, what problems do they have, and how much are they willing to pay for a
solution? Answering these questions honestly is harder than it sounds, but every
useful plan begins there, long before anyone talks about money or new offices.

The history of the city can be read in its streets. Near the river the lanes are
narrow and crooked, because they follow paths that people walked centuries ago.
Farther out, the roads become straight and wide, laid out by engineers who had
maps, rulers and the confidence of a modern age that believed in order.

Children learn languages by listening, guessing and making mistakes. They repeat
the sounds they hear, notice which words bring a smile or a glass of milk, and
slowly build a picture of how sentences work. Adults can learn the same way if
they are willing to speak before they feel ready and to laugh at their errors.

In the evening the harbour grew quiet. Fishing boats came back one after another,
their engines slowing as they passed the lighthouse, and the workers on the quay
carried boxes of fish to the market hall. Seabirds circled overhead, calling to
each other, and the last light of the sun turned the water the colour of copper.

Good software is written for people as much as for computers. Clear names, short
functions and honest comments help the next person who reads the code, and that
person is very often the author, six months later, having forgotten everything.
Tests are a way of writing down what the program is supposed to do.

The garden behind the house was not large, but it was full of life. There were
roses along the fence, a row of beans climbing wooden poles, and an old apple tree
that gave more fruit than the family could eat. Every autumn the neighbours were
invited to take what they wanted, and they always came back with jam in return.

Scientists often say that a good question is worth more than a quick answer. An
experiment that fails can teach as much as one that succeeds, provided that it was
designed carefully and that the results are reported truthfully. Knowledge grows
slowly, one measurement at a time, and it is shared by everyone who checks it.

The committee met on Tuesday to discuss the budget for the following year. Several
members argued that public transport deserved more support, while others wanted to
reduce taxes for local shops. After a long debate they agreed to publish a draft,
invite comments from residents, and hold the final vote early in the spring.

My grandmother kept a diary for over fifty years. Each evening she wrote a few
lines about the weather, the visitors who had called, the price of eggs and the
health of her animals. Reading those pages now, we see an entire world: quiet,
hard working, sometimes worried, but always curious about tomorrow.

Running a marathon is mostly a matter of preparation. Months before the race,
runners increase their weekly distance slowly, sleep enough, eat simple food and
listen carefully to their bodies. On the day itself, the hardest part is holding
back at the start, when excitement makes everyone want to run too fast.

The hospital opened a new wing last winter, with bright rooms, modern equipment
and a small garden where patients can sit in the sun. Doctors and nurses say the
change has already made a difference: people recover faster when they can see
trees, hear birds and feel that they are treated with care and respect.

Travelling by bicycle through the countryside, you notice details that drivers
miss: the smell of cut hay, the sound of a stream under a bridge, a farmer waving
from a tractor. Distances feel real again, and every hill is earned. At night a
simple dinner in a village inn tastes better than any meal in an expensive city.

Music has been part of human life for as long as anyone can tell. Ancient flutes
made from bird bones have been found in caves, and every known culture sings. A
melody can calm a crying baby, bring strangers together at a festival, or carry
memories across decades, so that an old song suddenly returns a forgotten summer.

Electricity reaches our homes through a long chain of machines and wires. Power
stations turn heat, wind, water or sunlight into current; transformers raise the
voltage so that it can travel far without losing much energy; and smaller stations
near every neighbourhood lower it again before it arrives at the kitchen socket.

What is the capital of France? Paris is the capital and largest city of France.
How many days are there in a week? There are seven days in a week. Where does the
sun rise? The sun rises in the east and sets in the west. Thank you for asking;
please let me know if there is anything else that I can help you with today.
"""


def make_tiny_model(path: Path, dtype: str = "float32") -> Path:
    """Write (once) a tiny random Qwen3 model directory at ``path`` and return it.

    ``dtype`` is one of ``float32``, ``bfloat16``, ``float16``. A directory whose
    marker records the same build is reused as it is.
    """
    path = Path(path)
    build = {"kind": "tiny-qwen3", "version": 1, "seed": SEED, "dtype": dtype}
    marker = path / MARKER_NAME
    if marker.is_file() and json.loads(marker.read_text()) == build:
        return path

    path.parent.mkdir(parents=True, exist_ok=True)
    # Built beside the target and renamed, so a killed build leaves no half model.
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        tokenizer = _train_tokenizer()
        vocab_size = _round_up(tokenizer.get_vocab_size(), 64)
        _write_tokenizer_files(tmp, tokenizer)
        _write_config(tmp, vocab_size, dtype)
        _write_weights(tmp, vocab_size, dtype)
        (tmp / MARKER_NAME).write_text(json.dumps(build))
        tmp.chmod(0o755)  # mkdtemp makes it owner-only
        if path.exists():
            shutil.rmtree(path)  # stale or other build: replace it
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _train_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        special_tokens=list(SPECIAL_TOKENS),
        # The full byte alphabet, so any text (not only the corpus's letters) encodes.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=1,
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus_lines(), trainer)
    return tokenizer


def _corpus_lines() -> list[str]:
    # Joined paragraphs, so merges can span the hard line wraps above.
    return [" ".join(p.split()) for p in CORPUS.split("\n\n")]


def _write_tokenizer_files(directory: Path, tokenizer: Any) -> None:
    tokenizer.save(str(directory / "tokenizer.json"))
    eos_id = tokenizer.token_to_id("<|im_end|>")
    pad_id = tokenizer.token_to_id("<|endoftext|>")
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHATML_TEMPLATE,
    }
    _dump(directory / "tokenizer_config.json", tokenizer_config)
    _dump(
        directory / "generation_config.json",
        {"eos_token_id": [eos_id, pad_id], "pad_token_id": pad_id},
    )


def _write_config(directory: Path, vocab_size: int, dtype: str) -> None:
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": MAX_POSITIONS,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "layer_types": ["full_attention"] * LAYERS,
        "max_window_layers": LAYERS,
        "use_sliding_window": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": SPECIAL_TOKENS.index("<|im_end|>"),
        "pad_token_id": SPECIAL_TOKENS.index("<|endoftext|>"),
        # transformers 5 reads "dtype", older readers (and some of vLLM) "torch_dtype".
        "dtype": dtype,
        "torch_dtype": dtype,
    }
    _dump(directory / "config.json", config)


def _write_weights(directory: Path, vocab_size: int, dtype: str) -> None:
    import torch
    from safetensors.torch import save_file

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in torch_dtype:
        raise ValueError(f"dtype must be one of {sorted(torch_dtype)}, not {dtype!r}")
    generator = torch.Generator().manual_seed(SEED)

    def normal(*shape: int) -> torch.Tensor:
        # NOTE: unit-variance-preserving scale (1/sqrt(fan_in)), not the usual 0.02:
        # with tiny weights the last token's embedding dominates and greedy output
        # collapses to one repeated token, which would make agreement tests vacuous.
        return torch.randn(*shape, generator=generator) / shape[-1] ** 0.5

    def embedding(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    q_out, kv_out = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    tensors = {"model.embed_tokens.weight": embedding(vocab_size, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": torch.ones(HIDDEN),
            p + "post_attention_layernorm.weight": torch.ones(HIDDEN),
            p + "self_attn.q_proj.weight": normal(q_out, HIDDEN),
            p + "self_attn.k_proj.weight": normal(kv_out, HIDDEN),
            p + "self_attn.v_proj.weight": normal(kv_out, HIDDEN),
            p + "self_attn.o_proj.weight": normal(HIDDEN, q_out),
            p + "self_attn.q_norm.weight": torch.ones(HEAD_DIM),
            p + "self_attn.k_norm.weight": torch.ones(HEAD_DIM),
            p + "mlp.gate_proj.weight": normal(INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": normal(INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": normal(HIDDEN, INTERMEDIATE),
        }
    tensors["model.norm.weight"] = torch.ones(HIDDEN)
    # Untied output head: with tied weights the argmax echoes the last input token.
    tensors["lm_head.weight"] = normal(vocab_size, HIDDEN) * 4
    converted = {name: t.to(torch_dtype[dtype]).contiguous() for name, t in tensors.items()}
    save_file(converted, str(directory / "model.safetensors"), metadata={"format": "pt"})


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _dump(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
