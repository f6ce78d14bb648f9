"""A newcomer's first calls: five questions, no sampling field and no length sent, each
streamed alone as the README's first example does. Prints one table row a question:
the time from the request to the last event, the tokens, the finish reason and the
answer, so that a change to the served defaults can be judged by what a user reads.

    python -m bench.probes.first_answers [--base-url http://127.0.0.1:8000] [--model NAME]
"""

from __future__ import annotations

import argparse
import json
import time

import httpx

QUESTIONS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a CPU does in one sentence.",
    "Give me three tips for staying focused.",
    "What is the largest planet in the solar system?",
)


def ask(client: httpx.Client, model: str, question: str) -> tuple[float, int, str, str]:
    """Seconds to the stream's end, tokens, finish reason and text of one streamed answer."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.monotonic()
    text, finish, num_tokens = "", "", 0
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            for choice in chunk["choices"]:
                text += choice["delta"].get("content") or ""
                finish = choice["finish_reason"] or finish
            if chunk.get("usage"):
                num_tokens = chunk["usage"]["completion_tokens"]
    return time.monotonic() - start, num_tokens, finish, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--api-key", default="unused")
    args = parser.parse_args()
    headers = {"Authorization": f"Bearer {args.api_key}"}
    with httpx.Client(base_url=args.base_url, headers=headers, timeout=900) as client:
        print("| question | seconds | tokens | finish | answer |")
        print("| --- | --- | --- | --- | --- |")
        for question in QUESTIONS:
            seconds, num_tokens, finish, text = ask(client, args.model, question)
            answer = " / ".join(line for line in text.splitlines() if line.strip())
            print(f"| {question} | {seconds:.2f} | {num_tokens} | `{finish}` | {answer} |")


if __name__ == "__main__":
    main()
