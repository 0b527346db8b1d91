#!/usr/bin/env python3
# The busy-vs-quiet measurement of issue 24 (see docs/measurement.md, shared servers).
# usage: burst.py PORT ON_S OFF_S PROMPT_TOKENS N_PREDICT LOG
# Burst client: ON seconds of back-to-back requests, OFF seconds of silence, until killed.
import json, sys, time, urllib.request, random
port, on, off, prompt_n, n_predict = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
log = open(sys.argv[6], 'a')
i = 0
while True:
    t_end = time.time() + on
    while time.time() < t_end:
        i += 1
        body = json.dumps({'prompt': [1] + [random.randint(100, 20000) for _ in range(prompt_n)], 'n_predict': n_predict, 'cache_prompt': False}).encode()
        t0 = time.time()
        try:
            urllib.request.urlopen(urllib.request.Request(f'http://127.0.0.1:{port}/completion', body, {'Content-Type': 'application/json'})).read()
        except Exception as e:
            print('err', e, file=log)
        print(f'req {i} {t0:.3f} {time.time():.3f}', file=log, flush=True)
    time.sleep(off)
