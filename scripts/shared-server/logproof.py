#!/usr/bin/env python3
# The server-side proof: llama-server log task order vs the samples of a results file.
# usage: logproof.py SERVER.log RESULTS.jsonl (foreign tasks: 600..700 tokens at release)
# Maps a results file's samples to llama-server's own log tasks (launch/release order) and
# reports which samples overlapped a foreign task, and whether those are flagged.
import json, re, sys
log, res = open(sys.argv[1]).read().splitlines(), sys.argv[2]
open_, tasks = {}, []
for i, l in enumerate(log):
    m = re.search(r'\| task (\d+) \|', l)
    if not m: continue
    t = int(m.group(1))
    if 'launch_slot_' in l and 'processing task' in l: open_[t] = i
    elif 'stop processing' in l and t in open_:
        n = int(re.search(r'n_tokens = (\d+)', l).group(1)); tasks.append((open_.pop(t), i, t, n))
tasks.sort()
samples = [json.loads(l) for l in open(res) if '"type":"sample"' in l]
key = lambda s: s['prompt_tokens'] + s['output_tokens'] - 1
foreign = [t for t in tasks if 600 <= t[3] <= 700]
# our tasks: the sequence of tasks whose size matches the samples in order, searched as a contiguous run
mine = [t for t in tasks if t[3] >= 1000]
sizes = [key(s) for s in samples]
for start in range(len(mine) - len(sizes) + 1):
    if [t[3] for t in mine[start:start+len(sizes)]] == sizes: break
else: sys.exit("no match")
ours = mine[start:start+len(sizes)]
bad = over = 0
for s, t in zip(samples, ours):
    hit = [f[2] for f in foreign if f[0] < t[1] and t[0] < f[1]]
    flagged = 'foreign_load' in s['flags']
    over += bool(hit)
    if hit and not flagged: bad += 1
    print(s['context_tokens'], s['rep'], 'task', t[2], 'overlaps foreign', hit, 'flagged' if flagged else 'clean')
print(f"samples {len(samples)}; overlapping foreign tasks in the server log: {over}; of those unflagged: {bad}; flagged without overlap in the log: {sum('foreign_load' in s['flags'] for s in samples) - over}")
