#!/usr/bin/env python3
# Busy vs quiet: samples flagged and waited, longest wait, medians side by side.
# usage: summ.py QUIET.jsonl BUSY.jsonl
import json, sys, statistics as st
def load(p):
    return [json.loads(l) for l in open(p) if '"type":"sample"' in l]
def med(v): return round(st.median(v),1) if v else None
q, b = load(sys.argv[1]), load(sys.argv[2])
flag = lambda s: 'foreign_load' in s['flags']
waited = [s for s in b if (s.get('idle_wait_ms') or 0) > 0]
print(f"busy: {len(b)} samples, {sum(map(flag,b))} foreign_load, {sum('idle_wait_expired' in s['flags'] for s in b)} idle_wait_expired, {len(waited)} waited, longest wait {max([s.get('idle_wait_ms') or 0 for s in b])/1000:.1f} s, total wait {sum([s.get('idle_wait_ms') or 0 for s in b])/1000:.1f} s")
print(f"quiet: {len(q)} samples, {sum(map(flag,q))} foreign_load, {sum((s.get('idle_wait_ms') or 0)>0 for s in q)} waited")
print("| context | quiet TTFT ms | busy clean TTFT ms | busy all (unchecked) TTFT ms | quiet decode tok/s | busy clean decode tok/s | busy all decode tok/s | busy clean/all n |")
print("|---|---|---|---|---|---|---|---|")
for c in sorted({s['context_tokens'] for s in q}):
    qq=[s for s in q if s['context_tokens']==c and s['status']=='ok']
    bb=[s for s in b if s['context_tokens']==c and s['status']=='ok']
    bc=[s for s in bb if not flag(s)]
    g=lambda ss,k:[s[k] for s in ss if s.get(k) is not None]
    print(f"| {c} | {med(g(qq,'ttft_ms'))} | {med(g(bc,'ttft_ms'))} | {med(g(bb,'ttft_ms'))} | {med(g(qq,'decode_tokens_per_s'))} | {med(g(bc,'decode_tokens_per_s'))} | {med(g(bb,'decode_tokens_per_s'))} | {len(bc)}/{len(bb)} |")
