"""How fast does a running server prefill a lone long prompt, in its dtype on its CPU?

    python -m bench.studies.probe_prefill --base-url http://127.0.0.1:8000 --tokenizer DIR \\
        --out bench/results/dtype-prefill/float32.json

The same probe ``bench --calibrate`` uses (three distinct 1,500-token prompts, one
generated token each, median time to first token), written with the server's
dtype and CPU features, so that two servers (two dtypes, two machines) compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import httpx

from bench.lib.calibrate import measure_prefill, write_host
from bench.lib.client import ClientSettings
from bench.lib.endpoint import wait_ready
from bench.lib.tokens import load_counter


async def probe(args: argparse.Namespace) -> dict[str, object]:
    async with httpx.AsyncClient(timeout=900.0) as http:
        models = await wait_ready(http, args.base_url, None, 900.0)
        client = ClientSettings(base_url=args.base_url, model=models[0], max_tokens=1)
        ttfts, tokens_per_s = await measure_prefill(http, client, load_counter(args.tokenizer))
        host = await write_host(http, args.base_url, args.admin_token, args.out.parent)
    return {"probe_ttft_s": ttfts, "prefill_tokens_per_s": tokens_per_s, **host}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--tokenizer")
    parser.add_argument("--admin-token")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result = asyncio.run(probe(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("probe_ttft_s", "prefill_tokens_per_s", "dtype")}))


if __name__ == "__main__":
    main()
