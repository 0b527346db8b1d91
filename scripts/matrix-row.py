#!/usr/bin/env python3
"""One Markdown table row of `scripts/test-real-servers --matrix`, from a ctxbench results file.

usage: scripts/matrix-row.py SERVER RESULTS EXIT_CODE [STDERR]
       scripts/matrix-row.py --header

RESULTS is JSON Lines (docs/results-schema.md): a `run` header line, then `sample` lines (other
line types are ignored). Columns:
  measured        yes (usable/all samples) | no, and why: what made the samples unusable, or
                  ctxbench's last `error:` line from STDERR when there is no results file
  length method   the header's server.prompt_method, up to its details, and the stated
                  tolerance when it is not exact
  worst length    the largest |prompt_tokens - context_tokens| of the samples that answered,
                  with its share of the target, against the stated tolerance
  cold            proven (every answered sample's cached-token count was reported and none
                  was contaminated) | unverified (k of n had no count) | contaminated (k of n)
  decode          client/server decode agreement: the median of client ÷ server decode rate
                  over samples with a server rate, and how many were flagged
                  client_server_disagree; n/a where the server reports no decode timing
  exit            ctxbench's exit code
Standard library only.
"""
import json
import statistics
import sys

COLUMNS = ["server", "measured", "length method", "worst length error", "cold", "client/server decode", "exit"]


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def read(path):
    header, samples = None, []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    v = json.loads(line)
                except ValueError:
                    continue  # a torn last line
                t = v.get("type")
                if t in ("run", "header") and header is None:
                    header = v
                elif t == "sample":
                    samples.append(v)
    except OSError:
        pass
    return header, samples


def flags(s):
    return s.get("flags") or []


def usable(s):
    return (
        s.get("status") == "ok"
        and s.get("phase", "cold") == "cold"
        and not s.get("contaminated")
        and s.get("length_ok") is not False
        and "suspected_cache_hit" not in flags(s)
    )


def tolerance(header, target):
    c = (header or {}).get("config") or {}
    return max(c.get("length_tolerance") or 0, -(-(c.get("length_tolerance_pct") or 0.0) * target // 1))


def last_error(stderr_path):
    """ctxbench's last `error: …` line, or None."""
    try:
        with open(stderr_path, encoding="utf-8", errors="replace") as f:
            lines = [l.strip() for l in f if l.strip().startswith("error:")]
    except (OSError, TypeError):
        return None
    return lines[-1][len("error:"):].strip() if lines else None


def why_unusable(samples):
    """What made the samples unusable, counted: '2 failed (http), 1 contaminated'."""
    failed = [s for s in samples if s.get("status") != "ok"]
    kinds = sorted({(s.get("error") or {}).get("kind") or "?" for s in failed})
    parts = []
    if failed:
        parts.append(f"{len(failed)} failed ({', '.join(kinds)})")
    ok = [s for s in samples if s.get("status") == "ok"]
    for label, test in [
        ("contaminated", lambda s: s.get("contaminated")),
        ("length off", lambda s: s.get("length_ok") is False),
        ("suspected cache hit", lambda s: "suspected_cache_hit" in flags(s)),
    ]:
        n = sum(1 for s in ok if test(s))
        if n:
            parts.append(f"{n} {label}")
    return ", ".join(parts) or "none usable"


def short_method(header):
    srv = (header or {}).get("server") or {}
    method = srv.get("prompt_method") or "–"
    for cut in (" (", ":"):
        method = method.split(cut)[0]
    pct = ((header or {}).get("config") or {}).get("length_tolerance_pct") or 0
    return method + (f" (tolerance {100 * pct:g}%)" if pct else "")


def row(server, path, code, stderr_path=None):
    header, samples = read(path)
    if header is None:
        why = last_error(stderr_path) or "no results file"
        return [server, f"no ({why[:160]})", "–", "–", "–", "–", code]
    ok = [s for s in samples if s.get("status") == "ok"]
    n_use = sum(1 for s in samples if usable(s))
    if n_use:
        measured = f"yes ({n_use}/{len(samples)} usable)"
    elif samples:
        measured = f"no ({len(samples)} samples: {why_unusable(samples)})"
    else:
        why = last_error(stderr_path) or "no samples"
        measured = f"no ({why[:160]})"
    method = short_method(header)

    worst = "–"
    counted = [s for s in ok if s.get("prompt_tokens") is not None and s.get("context_tokens")]
    if counted:
        w = max(counted, key=lambda s: abs(s["prompt_tokens"] - s["context_tokens"]))
        err = w["prompt_tokens"] - w["context_tokens"]
        tol = tolerance(header, w["context_tokens"])
        if err == 0:
            worst = "0 (exact)"
        else:
            worst = f"{err:+d} tokens ({100 * abs(err) / w['context_tokens']:.2f}% of {w['context_tokens']}; tolerance {tol:.0f})"
    elif ok:
        worst = "unreported"

    if not ok:
        cold = "–"
    else:
        dirty = sum(1 for s in ok if s.get("contaminated"))
        unverified = sum(1 for s in ok if not s.get("cache_verified"))
        if dirty:
            cold = f"contaminated ({dirty} of {len(ok)})"
        elif unverified:
            cold = f"unverified ({unverified} of {len(ok)} without a cached count)"
        else:
            cold = "proven"

    ratios, disagree = [], 0
    for s in ok:
        if "client_server_disagree" in flags(s):
            disagree += 1
        server_rate = (s.get("server") or {}).get("predicted_per_second")
        client_rate = s.get("decode_tokens_per_s")
        if server_rate and client_rate:
            ratios.append(client_rate / server_rate)
    if ratios:
        decode = f"×{statistics.median(ratios):.3f} median over {len(ratios)}, {disagree} disagree"
    else:
        decode = "n/a (no server decode timing)"
    return [server, measured, method, worst, cold, decode, code]


def main():
    if sys.argv[1:] == ["--header"]:
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        return
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    print("| " + " | ".join(cell(c) for c in row(*sys.argv[1:])) + " |")


if __name__ == "__main__":
    main()
