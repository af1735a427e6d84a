#!/usr/bin/env python3
"""Where the time goes in a stage advance, from a bench run's logs.

    FLOW_LOG_FORMAT=json FLOW_BENCH_LOG=info,flow_scheduler=debug,flow_worker=debug \
        flow-bench --work-dir /tmp/trace run site
    services/bench/stage_hops.py /tmp/trace

For every (task, step) whose next step ran: the worker's "step finished" ->
the scheduler's "result received" -> "result committed" -> the first
"outbox published" after the commit -> the next step's "job received" on a
worker (docs/benchmarks.md; the traces in services/bench/results/JOURNAL.md,
"A site's stage advance waits for a core"). Percentiles in milliseconds.
"""
import json, glob, sys, bisect
from datetime import datetime
def ts(s): return datetime.fromisoformat(s.replace('Z','+00:00')).timestamp()
d=sys.argv[1]
fin={}; recv={}; comm={}; jobrecv={}; pubs=[]
for f in glob.glob(d+'/worker-*.log'):
    for line in open(f):
        if '"step finished"' not in line and '"job received"' not in line: continue
        try: j=json.loads(line)
        except ValueError: continue
        sp=j.get('span',{}); key=(sp.get('task'),sp.get('step'))
        m=j['fields']['message']; t=ts(j['timestamp'])
        if m=='step finished': fin[key]=max(fin.get(key,0),t)
        elif m=='job received': jobrecv[key]=min(jobrecv.get(key,1e20),t)
for line in open(d+'/scheduler.log'):
    if 'result received' in line or 'result committed' in line or 'outbox published' in line:
        try: j=json.loads(line)
        except ValueError: continue
        m=j['fields']['message']; t=ts(j['timestamp'])
        if m=='result received':
            sp=j['span']; key=(sp['task'],sp['step']); recv[key]=min(recv.get(key,1e20),t)
        elif m=='result committed':
            key=(j['fields']['task_id'],j['fields']['step']); comm[key]=min(comm.get(key,1e20),t)
        else: pubs.append(t)
pubs.sort()
rows=[]
for (task,step),tf in fin.items():
    nxt=(task,step+1)
    if nxt not in jobrecv or (task,step) not in recv or (task,step) not in comm: continue
    tr=recv[(task,step)]; tc=comm[(task,step)]
    i=bisect.bisect_left(pubs,tc)
    if i>=len(pubs): continue
    tp=pubs[i]; tj=jobrecv[nxt]
    rows.append((tr-tf,tc-tr,tp-tc,tj-tp,tj-tf))
def pct(v,p):
    v=sorted(v); return v[min(len(v)-1,int(round(p/100*(len(v)-1))))]
names=['finish->received','received->committed','committed->published','published->job received','whole']
print(len(rows),'stage boundaries')
if not rows: sys.exit('no stage boundary found: were the logs written with FLOW_LOG_FORMAT=json and debug levels?')
for i,n in enumerate(names):
    v=[r[i]*1000 for r in rows]
    print(f'{n:28s} p50 {pct(v,50):7.1f}  p99 {pct(v,99):7.1f}  max {max(v):7.1f} ms')
