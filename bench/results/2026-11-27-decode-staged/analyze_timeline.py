# Reads a timeline_injection.cpp CSV: the graph replays of a decode step, each node's median duration summed by
# kernel name, the gaps inside a replay, the host's cudaGraphLaunch time and the GPU's idle time between replays.
# python3 analyze_timeline.py timeline.csv
import csv, sys, collections, statistics as st
rows = list(csv.DictReader(open(sys.argv[1])))
for r in rows:
    r['start']=int(r['start']); r['end']=int(r['end']); r['graph']=int(r['graph']); r['correlation']=int(r['correlation'])
gpu = [r for r in rows if r['what'] in ('kernel','memcpy') and r['graph']!=0]
# group by correlation (graph launch)
reps = collections.defaultdict(list)
for r in gpu: reps[r['correlation']].append(r)
keys = sorted(reps, key=lambda c: min(x['start'] for x in reps[c]))
print("replays", len(keys))
# skip first replay of each run? take all
spans=[]; periods=[]; busy=[]
per_node = collections.defaultdict(list); gaps_after = collections.defaultdict(list)
prev_end=None; prev_start=None
for c in keys:
    ev = sorted(reps[c], key=lambda x: x['start'])
    s = ev[0]['start']; e = max(x['end'] for x in ev)
    spans.append((e-s)/1e3)
    busy.append(sum(x['end']-x['start'] for x in ev)/1e3)
    if prev_start is not None: periods.append((s-prev_start)/1e3)
    prev_start = s
    for i,x in enumerate(ev):
        per_node[(i, x['name'][:70])].append((x['end']-x['start'])/1e3)
        if i+1 < len(ev): gaps_after[i].append((ev[i+1]['start']-x['end'])/1e3)
periods = [p for p in periods if p < 5000]
print("nodes per replay", collections.Counter(len(reps[c]) for c in keys).most_common(3))
print("span us median %.1f, busy sum median %.1f, period median %.1f" % (st.median(spans), st.median(busy), st.median(periods)))
# aggregate by kernel name
by_name = collections.defaultdict(lambda: [0,0.0,0.0])
for (i,name), v in per_node.items():
    m = st.median(v); g = st.median(gaps_after[i]) if gaps_after[i] else 0
    by_name[name][0]+=1; by_name[name][1]+=m; by_name[name][2]+=g
tot = sum(v[1] for v in by_name.values()); totg = sum(v[2] for v in by_name.values())
print("sum of node medians %.1f us, sum of gaps after %.1f us" % (tot, totg))
for name, (n, d, g) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
    print("%3d x %-70s %7.1f us (%.2f each), gaps after %6.1f" % (n, name, d, d/n, g))
# host
api = [r for r in rows if r['what']=='api']
gl = [r for r in api if 'GraphLaunch' in r['name']]
print("cudaGraphLaunch calls", len(gl), "median host us %.1f" % st.median([(r['end']-r['start'])/1e3 for r in gl]))
# idle gap between replay end and next replay start
idle=[]
for a,b in zip(keys, keys[1:]):
    ea = max(x['end'] for x in reps[a]); sb = min(x['start'] for x in reps[b])
    if sb-ea < 5e6: idle.append((sb-ea)/1e3)
print("GPU idle between replays median %.1f us, p10 %.1f p90 %.1f" % (st.median(idle), sorted(idle)[len(idle)//10], sorted(idle)[9*len(idle)//10]))
