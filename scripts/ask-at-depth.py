#!/usr/bin/env python3
"""The seed's own check, as a recipe: is a question about a long prompt answered correctly?

The seed validated its 200k deployment with one 60,010-token prompt whose answer came back
right ("Dog."). This asks the same kind of question of any OpenAI-compatible chat server: a
sentence stating a fact the model cannot know beforehand ("The quick brown fox jumps over the
lazy cat.": a model that ignores its context answers "dog", the famous sentence's animal) is
placed at DEPTH percent of about TOKENS tokens of natural English (Python's own documentation,
`pydoc_data.topics`, as `ctxbench --corpus natural` reads it), and the question comes last.
The answer passes when it names the cat.

Lengths are sized with the server's /tokenize (llama.cpp's; other servers: pass --no-tokenize
and the length is approximate, ~4 characters a token). Standard library only.

usage: ask-at-depth.py URL [--tokens N[,N...]] [--depths D[,D...]] [--max-tokens N] [--no-tokenize]
exit status: 0 when every answer passed, 1 otherwise.
"""

import argparse
import json
import sys
import urllib.request
from pydoc_data.topics import topics

FACT = "\nThe quick brown fox jumps over the lazy cat.\n"
QUESTION = (
    "\n\nIn the text above, what animal does the quick brown fox jump over? "
    "Answer in one word."
)
EXPECTED = "cat"


def post(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.load(r)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("--tokens", default="1000", help="prompt lengths, comma-separated")
    ap.add_argument("--depths", default="10,50,90", help="percent, comma-separated")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--no-tokenize", action="store_true")
    a = ap.parse_args()
    url = a.url.rstrip("/")
    text = "\n\n".join(topics[k] for k in sorted(topics))
    if a.no_tokenize:
        chars = None
    else:
        ids = post(url, "/tokenize", {"content": text[:400_000]})["tokens"]
        chars = 400_000 / len(ids)
    ok = True
    print(f"{'asked':>6} {'prompt':>7} {'depth':>5}  answer")
    for n in (int(x) for x in a.tokens.split(",")):
        # Characters of filler for n tokens, less the fact, the question and the template.
        filler = text[: int((n - 60) * (chars or 4.0))]
        for d in (int(x) for x in a.depths.split(",")):
            cut = len(filler) * d // 100
            # Break at a space, so the fact starts a sentence of its own.
            cut = filler.rfind(" ", 0, cut) + 1 if d not in (0, 100) else cut
            prompt = filler[:cut] + FACT + filler[cut:] + QUESTION
            r = post(
                url,
                "/v1/chat/completions",
                {
                    "messages": [{"role": "user", "content": prompt}],
                    "temperature": 0,
                    "max_tokens": a.max_tokens,
                    "cache_prompt": False,
                },
            )
            answer = r["choices"][0]["message"]["content"] or ""
            passed = EXPECTED in answer.lower()
            ok &= passed
            used = r.get("usage", {}).get("prompt_tokens", "?")
            print(
                f"{n:>6} {used:>7} {d:>4}%  {answer.strip()!r}: {'PASS' if passed else 'FAIL'}",
                flush=True,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
