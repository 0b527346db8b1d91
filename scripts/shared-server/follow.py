#!/usr/bin/env python3
# The busy-vs-quiet measurement of issue 24 (see docs/measurement.md, shared servers).
# usage: follow.py PORT RESULTS.jsonl EVENTS PROMPT_TOKENS N_PREDICT LOG
# A second client driven by the sweep's progress: after every odd sample recorded, it waits
# until a slot is processing (the next sample is in flight) and sends one foreign request
# (PROMPT tokens, N_PREDICT generated, more than the sample's own output) into it; stops
# after EVENTS samples. Logs each request's send and end time.
import json, sys, time, urllib.request, random, threading
port, results, events, prompt_n, n_predict, log = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), open(sys.argv[6], 'a')
def count():
    try: return sum('"type":"sample"' in l for l in open(results))
    except FileNotFoundError: return 0
def busy():
    try: return any(s.get('is_processing') for s in json.load(urllib.request.urlopen(f'http://127.0.0.1:{port}/slots')))
    except Exception: return False
def send(i):
    body = json.dumps({'prompt': [1] + [random.randint(100, 20000) for _ in range(prompt_n)], 'n_predict': n_predict, 'cache_prompt': False}).encode()
    t0 = time.time()
    urllib.request.urlopen(urllib.request.Request(f'http://127.0.0.1:{port}/completion', body, {'Content-Type': 'application/json'})).read()
    print(f'req {i} {t0:.3f} {time.time():.3f}', file=log, flush=True)
seen, threads = 0, []
while seen < events:
    n = count()
    if n <= seen:
        time.sleep(0.005); continue
    seen = n
    if seen % 2 == 0: continue
    t = time.time()
    while not busy() and time.time() - t < 120: time.sleep(0.002)
    th = threading.Thread(target=send, args=(seen,)); th.start(); threads.append(th)
for th in threads: th.join()
